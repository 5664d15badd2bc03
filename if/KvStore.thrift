/*
 * kvmesh KvStore wire contract.
 *
 * Every message on every KvStore socket is one of the structs below, serialized with Thrift's
 * accelerated binary protocol (C extension):
 *   - command socket (ZMQ ROUTER), request frame  : Request
 *   - command socket, reply frame                  : Response
 *   - publication socket (ZMQ PUB), message frame  : Publication
 * Peers flood to each other by sending one-way KEY_SET requests to the peer's command socket.
 *
 * Compatibility (docs/compatibility.md): fields are only ever added, as optional fields with new
 * ids; an id is never reused, renumbered or retyped (tests/compat/test_idl_fields.py checks this
 * file against the field table of the newest release's corpus). A node of an older release skips
 * fields it does not know. When an older node could misread what a newer one sends, the KvStore
 * protocol version (kvstore/version.py PROTOCOL_VERSION) is bumped instead.
 */

namespace py kvstore_thrift

/* Sentinel for "never expires" (as Open/R: INT32_MIN), in the ttl_ms field of Value. */
const i64 TTL_INFINITY = -2147483648

/* Geometry of the anti-entropy digest tree: DIGEST_FANOUT children per node, DIGEST_DEPTH levels
 * below the root. Node ids are heap-ordered: root 0, children of n are n*FANOUT+1 .. n*FANOUT+FANOUT.
 * Every node of a mesh must use the same geometry. */
const i32 DIGEST_FANOUT = 16
const i32 DIGEST_DEPTH = 4

struct Value {
  /* 64-bit version; higher wins. Version 0 is invalid on the wire. */
  1: i64 version = 0
  /* Node (or client) that originated this version; higher id wins a version tie. */
  2: string originator_id
  /* Opaque payload. Absent on TTL-only updates. */
  3: optional binary value
  /* Remaining lifetime in milliseconds, or TTL_INFINITY. */
  4: i64 ttl_ms = TTL_INFINITY
  /* Bumped by the originator to refresh the TTL without changing the value. */
  5: i64 ttl_version = 0
  /* Fixed 64-bit hash of (version, originator_id, value); identical on every node. */
  6: optional i64 hash
}

enum Command {
  KEY_SET = 1,
  KEY_GET = 2,
  KEY_DUMP = 3,
  HASH_DUMP = 4,
  PEER_ADD = 5,
  PEER_DEL = 6,
  PEER_DUMP = 7,
  COUNTERS_GET = 8,
  DIGEST_GET = 9,
  /* Who is this node: name, URLs, readiness (see NodeInfo). */
  NODE_INFO = 10,
}

enum PeerState {
  IDLE = 0,
  SYNCING = 1,
  INITIALIZED = 2,
}

/* A leaf node's key filters (Open/R's KvStoreFilters, OR semantics): a key-value matches when its
 * key starts with one of key_prefixes OR its originator_id is one of originator_ids. A leaf
 * always lists its own name among originator_ids (it keeps what it originates). */
struct KeyFilters {
  1: list<string> key_prefixes
  2: list<string> originator_ids
}

struct KeySetParams {
  1: map<string, Value> key_vals
  /* false: one-way set (no reply frame at all), as used by flooding. */
  2: bool solicit_response = true
  /* Flood path: ids of the nodes this publication has traversed, oldest first. */
  3: list<string> node_ids
  /* Set by a peer on the finalize step of a full sync. */
  4: optional string sender_id
  5: optional i64 timestamp_ms
}

struct KeyGetParams {
  1: list<string> keys
}

struct KeyDumpParams {
  /* Key prefix (plain string prefix, not a regex); empty matches every key. */
  1: string prefix = ""
  /* Originator filter; empty matches every originator. Combined with prefix by AND. */
  2: set<string> originator_ids
  /* When present, the reply holds only what differs (3-way full sync): key_vals better than or
   * missing from these hashes, and tobe_updated_keys the caller should send back. */
  3: optional map<string, Value> key_val_hashes
  /* Peer name of the requester, when a peer asks (full sync). */
  4: optional string sender_id
  /* When present, restrict the dump to these digest-tree leaf buckets (anti-entropy). */
  5: optional list<i32> buckets
  /* A leaf's sync request: only key-values matching these filters count on either side (the
   * difference, tobe_updated_keys); the responder floods the requester only matching ones. */
  6: optional KeyFilters filters
}

struct DigestParams {
  /* Digest-tree node ids whose children's digests are wanted. */
  1: list<i32> node_ids
  /* A leaf's digest walk: the digests cover only the key-values matching these filters. */
  2: optional KeyFilters filters
  /* Peer name of the requester (so a responder learns a leaf peer's filters). */
  3: optional string sender_id
  /* The requester's protocol versions (since 0.5.0; absent from a 0.4.0 node: protocol 1):
   * the first DIGEST_GET of a sync is the peers' hello (kvstore/protocol.py). */
  4: optional i32 protocol
  5: optional i32 min_protocol
  /* The requester's software version (kvstore/version.py), for PEER_DUMP and logs. */
  6: optional string version
}

struct PeerSpec {
  1: string cmd_url
  2: string pub_url = ""
  /* The fields below are filled in by PEER_DUMP. */
  3: PeerState state = PeerState.IDLE
  4: i64 state_since_ms = 0
  5: i32 flaps = 0
  /* PEER_DUMP: the peer's key filters, once known (it is a leaf). */
  6: optional KeyFilters filters
  /* PEER_DUMP (since 0.5.0): the peer's protocol and software version, as its last sync
   * reply said (protocol 1 and no version: a 0.4.0 node). */
  7: optional i32 protocol
  8: optional string version
  /* PEER_DUMP (since 0.5.0): why this node refuses the peering (the state stays IDLE and the
   * peer gets no floods), e.g. a protocol this node cannot speak; absent when not refused. */
  9: optional string refused
}

struct PeerAddParams {
  1: map<string, PeerSpec> peers
}

struct PeerDelParams {
  1: list<string> peer_names
}

struct Request {
  1: Command cmd
  2: optional KeySetParams key_set
  3: optional KeyGetParams key_get
  4: optional KeyDumpParams key_dump
  5: optional PeerAddParams peer_add
  6: optional PeerDelParams peer_del
  7: optional DigestParams digest
}

struct Publication {
  1: map<string, Value> key_vals
  /* Keys that expired on the publishing node (local subscribers only; never flooded). */
  2: list<string> expired_keys
  3: list<string> node_ids
  /* Full-sync reply: keys the requester has better and should send back. */
  4: list<string> tobe_updated_keys
  5: optional i64 timestamp_ms
}

struct DigestReply {
  /* node id -> XOR digest of every key under that node */
  1: map<i32, i64> digests
  /* Set when the responder is a leaf: its own filters (its digests cover only those keys). */
  2: optional KeyFilters filters
  /* The responder's protocol versions and software version (since 0.5.0; absent: protocol 1). */
  3: optional i32 protocol
  4: optional i32 min_protocol
  5: optional string version
}

struct NodeInfo {
  /* Node id: used as originator_id by default and in flood paths (node_ids). */
  1: string name
  /* The URLs the node actually bound (a wildcard port is resolved). */
  2: string cmd_url
  3: string pub_url
  /* True once every configured peer reached INITIALIZED or failed its first sync. */
  4: bool initial_sync_done = false
  5: i64 num_keys = 0
  6: i64 uptime_ms = 0
  /* Root of the anti-entropy digest tree: XOR over every key of a hash of (key, value hash,
   * ttl_version). Equal on two nodes whose stores agree (cheap convergence check). */
  7: i64 digest = 0
  /* How the node got its state: "EMPTY" (nothing on disk, no peer sync completed), "RESTORED"
   * (loaded from its data directory, no peer sync completed), "SYNCED" (a full sync with at
   * least one peer completed). See kvstore/store_state.py. */
  8: optional string store_state
  /* Set when the node is a leaf (docs/kvstore.md, "Leaf nodes"): its key filters. */
  9: optional KeyFilters leaf_filters
  /* Since 0.5.0 (absent from a 0.4.0 node): its software version (kvstore/version.py) and the
   * KvStore protocol versions it speaks, min_protocol .. protocol (kvstore/protocol.py). */
  10: optional string version
  11: optional i32 protocol
  12: optional i32 min_protocol
}

struct Error {
  /* Stable machine-readable code, e.g. MALFORMED, UNKNOWN_COMMAND, BAD_ARGUMENT, TOO_LARGE. */
  1: string code
  2: string message
}

struct Response {
  1: optional Error error
  2: optional Publication publication
  3: optional map<string, PeerSpec> peers
  4: optional map<string, i64> counters
  5: optional DigestReply digest
  6: optional NodeInfo node_info
  /* Solicited KEY_SET: keys that were not applied, with the reason (e.g. OLD_VERSION). */
  7: optional map<string, string> no_merge_reasons
}
