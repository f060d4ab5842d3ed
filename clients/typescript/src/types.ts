// The API's objects (web/openapi.json). Ids are
// numbers: JSON numbers, exact up to 2^53, which every id a node plans is
// far below. Times are RFC 3339 strings in UTC.

export type RangeStatus = "planned" | "leased" | "done" | "failed";
export type NodeState = "active" | "idle" | "unseen" | "paused";

export interface Snapshot {
  /** The window covers every id below this one. */
  next: number;
  /** Bytes of the stored gzip snapshot. */
  size: number;
  /** Hex sha-256 of the stored bytes. */
  sha256: string;
  /** When it was stored (absent in a lease grant). */
  at?: string;
}

/** A snapshot upload's answer: what the node stored and, on a node in a
 * fleet, whether the fleet's object store has the window. */
export interface SnapshotStored extends Snapshot {
  /** In a fleet: the window (or a newer one) is where a node taking the
   * group over resumes from. False when the node's wait for it (its claim
   * TTL) passed, no peer is up, or the node lost the group first. */
  replicated?: boolean;
  /** With replicated false: the seconds until it is, estimated. */
  replicated_in_s?: number;
}

export interface Quarantine {
  error: string;
  node: string;
  at: string;
}

/** What a worker reported instead of a group's water marks (rule 13). */
export interface SourceError {
  error: string;
  node: string;
  at: string;
}

export interface Group {
  id: number;
  name: string;
  priority: number;
  active: boolean;
  range_size: number;
  start: number;
  tail_end: number;
  history_floor: number;
  created_at: string;
  quarantine: Quarantine | null;
  /** The source's last reported water marks (null before any). */
  low?: number | null;
  high?: number | null;
  /** The source it is read from: only nodes of this kind lease it. */
  kind: string;
  /** Set while its source last said it cannot be read. */
  source_error: SourceError | null;
}

export interface Lease {
  node_id: number;
  node: string;
  fence: number;
  leased_at: string;
  heartbeat_at: string;
  range_id: number | null;
  snapshot: Snapshot | null;
  ranges_done: number;
  headers: number;
}

export interface GroupDetail extends Group {
  lease: Lease | null;
  snapshot?: Snapshot | null;
  ranges: Partial<Record<RangeStatus, number>>;
  peer?: Record<string, unknown>;
}

export interface Range {
  id: number;
  group_id: number;
  start: number;
  end: number;
  /** The resume point: every id below it is indexed. */
  next: number;
  status: RangeStatus;
  priority: number;
  node_id: number | null;
  attempts: number;
  rule_version: number;
  headers: number;
  updated_at: string;
  last_error: string | null;
  last_error_at: string | null;
}

export interface Node {
  id: number;
  name: string;
  priority_min: number;
  priority_max: number;
  capacity: number;
  paused: boolean;
  paused_by: string;
  paused_at: string | null;
  held: number;
  last_seen_at: string | null;
  created_at?: string;
  state?: NodeState;
  /** Only in the answer to the node's registration. */
  token?: string;
  /** The kinds of group its worker reads. */
  kinds: string[];
  /** A visitor's home: the fleet node it is registered at. */
  home?: string;
}

export interface RegisteredNode extends Node {
  token: string;
}

/** A token made by a rotation, shown only in its answer. */
export interface NewToken {
  token: string;
}

/** The answer to a water mark report. */
export interface WatermarkReport {
  planned: number;
  /** The tail is not planned up to high yet: later reports plan the rest as ranges are leased. */
  capped: boolean;
}

export interface Rules {
  version: number;
  body: unknown;
}

/** A lease of a group: the fence every holder call names. */
export interface Grant {
  group: { id: number; name: string; priority: number; range_size?: number; start?: number };
  fence: number;
  rules: Rules;
  /** The snapshot to resume from; null: start an empty window. */
  snapshot: Snapshot | null;
  ttl_s: number;
  /** The group was taken from a holder that went quiet. */
  takeover?: boolean;
}

export interface Finding {
  kind: string;
  group: string;
  range: number | null;
  node: string;
  since: string;
  age_s: number;
  detail: string;
}

export interface Findings {
  stuck: Finding[];
  backlog: { planned: number; oldest_age_s: number; [k: string]: number };
}

export interface Fleet {
  name?: string;
  enabled: boolean;
  connected?: boolean;
  owned?: number;
  /** This node's events the fleet's stream has not acknowledged yet. */
  unpublished?: number;
  /** The stream position of this node's last acknowledged event. */
  published?: number;
  /** Present while NATS cannot serve some of the fleet's streams and
   * buckets: which, and why. Writes on groups are refused (503) meanwhile. */
  offline?: string;
  peers: Array<Record<string, unknown> & {
    name: string;
    /** up, down (no life seen for the claim TTL) or joining. */
    state: "up" | "down" | "unknown" | "joining";
    /** When it entered its state; for down, when its life was last seen. */
    state_since?: string | null;
    /** How many groups its claims name now. */
    owns?: number;
  }>;
}

export interface Watermark {
  id: number;
  name: string;
  low: number | null;
  high: number | null;
  reported_at: string | null;
}

export interface NodeSpec {
  name: string;
  priority_min?: number;
  priority_max?: number;
  capacity?: number;
  /** The kinds of group its worker reads (default ["default"]). */
  kinds?: string[];
}

/** What PATCH /nodes/{id} changes. */
export interface NodeChange {
  kinds?: string[];
  capacity?: number;
}

export interface GroupSpec {
  priority?: number;
  active?: boolean;
  range_size?: number;
  /** The first id the tail plans from; only on creation. */
  start?: number;
  /** The source it is read from (default "default"). */
  kind?: string;
}
