"""Fuzzing harnesses for every decoder of outside bytes (see docs/fuzzing.md)."""
