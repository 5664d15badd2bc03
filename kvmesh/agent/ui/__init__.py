"""The console served by every agent at `/ui/` (docs/console.md)."""
