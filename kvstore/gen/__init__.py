"""Python code generated from if/KvStore.thrift by `thrift --gen py:slots` (see tools/gen_thrift.sh)."""
