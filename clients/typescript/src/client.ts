// The client of one node's API with one token: the admin token for the
// admin calls, a node token for the worker calls. Connection errors and
// 503 answers are retried with backoff; nothing else is. "Nothing to do"
// (204) is never an error: the calls that can get it return null.

import { createHash } from "node:crypto";
import { httpsFetch, type PEM } from "./https.js";
import { version } from "./version.js";

import { InternalError, LeaseholdError, UnavailableError, ConflictError, errorFromAnswer, makeError } from "./errors.js";
import type {
  Findings, Fleet, Grant, Group, GroupDetail, GroupSpec, NewToken, Node, NodeChange, NodeSpec, Range, RangeStatus, RegisteredNode, Rules,
  SnapshotStored, Watermark, WatermarkReport,
} from "./types.js";

/** The node's address when none is given. */
export const DEFAULT_URL = "http://127.0.0.1:8080";

/** A capped exponential backoff with jitter; attempts counts the first try. */
export interface Backoff {
  minMs: number;
  maxMs: number;
  attempts: number;
}

/** Five tries over about six seconds: enough to ride out a node restart. */
export const DEFAULT_RETRY: Backoff = { minMs: 200, maxMs: 3000, attempts: 5 };

/** delayMs is the wait before try n+1 (n from 0), in [d/2, d], never below min. */
export function delayMs(b: Backoff, n: number): number {
  const lo = b.minMs > 0 ? b.minMs : 100;
  const hi = Math.max(b.maxMs, lo);
  const d = Math.min(hi, lo * 2 ** Math.min(n, 30));
  return Math.max(lo, d / 2 + Math.random() * (d / 2));
}

/** sleep waits ms, or until signal aborts (then throws its reason). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A snapshot body: bytes, text, a stream, or a function that makes one
 * (a function, like bytes, can be sent again on a retry). */
export type SnapshotSource =
  | Uint8Array
  | string
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array>
  | (() => Uint8Array | string | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>);

export interface SnapshotUpload {
  /** The body is gzip, stored as is; anything else the node compresses. */
  gzip?: boolean;
  /** The sha-256 of the body as sent (bytes or hex): the node refuses a body that does not match. */
  digest?: Uint8Array | string;
  /** For an operator's upload: let a window stand that makes the node index done ranges again. */
  force?: boolean;
  signal?: AbortSignal;
}

/** How a group is given back (release). */
export interface ReleaseOptions {
  /**
   * The holder stops cleanly, its progress and window saved: the range in
   * work gets back the attempt its lease counted (the body's `stopped`).
   */
  stopped?: boolean;
  signal?: AbortSignal;
}

export interface ClientOptions {
  /** The node's base address, e.g. http://127.0.0.1:8080. */
  url?: string;
  /** Sent as "Authorization: Bearer <token>". */
  token?: string;
  /** The backoff for connection errors and 503 answers. */
  retry?: Backoff;
  /** The fetch to use; Node's own by default, or httpsFetch with the
   * options below. */
  fetch?: typeof fetch;
  /** CAs (PEM) trusted for an https node's certificate, as the CLI's
   * --ca-file: for a node whose certificate your own CA signed. */
  ca?: PEM;
  /** A client certificate and key (PEM), for a node with --tls-client-ca. */
  cert?: PEM;
  key?: PEM;
  /** Names the program to the node (its nodes page shows a worker's last
   * one); "leasehold-client-ts/<version>" by default. A program puts its
   * own name and version first. */
  userAgent?: string;
}

interface Call {
  method: string;
  path: string;
  json?: unknown;
  body?: SnapshotSource;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
  /** Try once (no retries). */
  once?: boolean;
}

const enc = encodeURIComponent;

/** What a client sends as User-Agent unless told otherwise. */
export const USER_AGENT = `leasehold-client-ts/${version} node/${process.versions.node}`;

function toBytes(digest: Uint8Array | string): Uint8Array {
  return typeof digest === "string" ? Buffer.from(digest, "hex") : digest;
}

/** The Repr-Digest value of a sha-256 sum. */
export function formatReprDigest(sum: Uint8Array | string): string {
  return `sha-256=:${Buffer.from(toBytes(sum)).toString("base64")}:`;
}

/** The hex sha-256 of a Repr-Digest header, or "". */
export function parseReprDigest(v: string | null): string {
  for (const part of (v ?? "").split(",")) {
    const i = part.indexOf("=");
    if (i < 0 || part.slice(0, i).trim().toLowerCase() !== "sha-256") continue;
    const b = Buffer.from(part.slice(i + 1).trim().replace(/^:|:$/g, ""), "base64");
    return b.length === 32 ? b.toString("hex") : "";
  }
  return "";
}

export class Client {
  readonly url: string;
  readonly token: string;
  readonly retry: Backoff;
  readonly userAgent: string;
  private readonly fetchFn: typeof fetch;

  constructor(o: ClientOptions = {}) {
    this.url = (o.url || DEFAULT_URL).replace(/\/+$/, "");
    this.token = o.token ?? "";
    this.retry = o.retry ?? DEFAULT_RETRY;
    this.userAgent = o.userAgent ?? USER_AGENT;
    this.fetchFn = o.fetch ?? (o.ca || o.cert || o.key ? httpsFetch({ ca: o.ca, cert: o.cert, key: o.key }) : fetch);
  }

  /** withToken is a client of the same node with another token. */
  withToken(token: string, o: { retry?: Backoff } = {}): Client {
    return new Client({ url: this.url, token, retry: o.retry ?? this.retry, fetch: this.fetchFn, userAgent: this.userAgent });
  }

  // ---- the transport ----

  /**
   * send does a call with retries on connection errors and 503 and returns
   * the first answer that is neither. Error answers throw their
   * LeaseholdError; other answers are returned unread.
   */
  async send(c: Call): Promise<Response> {
    const attempts = c.once ? 1 : Math.max(this.retry.attempts, 1);
    const streamed = c.body !== undefined && !(c.body instanceof Uint8Array) && typeof c.body !== "string" && typeof c.body !== "function";
    const call = `${c.method} ${c.path.split("?")[0]}`;
    for (let attempt = 0; ; attempt++) {
      const headers: Record<string, string> = { Accept: "application/json", ...c.headers };
      if (this.token) headers["Authorization"] = `Bearer ${this.token}`;
      if (this.userAgent) headers["User-Agent"] = this.userAgent;
      const init: RequestInit & { duplex?: "half" } = { method: c.method, headers, signal: c.signal ?? null };
      if (c.json !== undefined) {
        headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(c.json);
      } else if (c.body !== undefined) {
        const b = typeof c.body === "function" ? c.body() : c.body;
        init.body = b as NonNullable<RequestInit["body"]>;
        if (typeof b !== "string" && !(b instanceof Uint8Array)) init.duplex = "half";
      }
      let err: LeaseholdError;
      let retryAfterMs = 0;
      try {
        const resp = await this.fetchFn(this.url + c.path, init);
        if (resp.status < 400) return resp;
        const text = await resp.text().catch(() => "");
        err = errorFromAnswer(resp.status, text, call);
        if (resp.status !== 503) throw err;
        retryAfterMs = (Number(resp.headers.get("Retry-After")) || 0) * 1000;
      } catch (e) {
        if (e instanceof LeaseholdError && e.status !== 503) throw e;
        if (c.signal?.aborted) throw c.signal.reason;
        err = e instanceof LeaseholdError ? e : makeError("unavailable", `node unreachable: ${describe(e)}`, 0, call, e);
      }
      // A streamed body was spent by this try.
      if (attempt + 1 >= attempts || streamed) throw err;
      await sleep(Math.min(Math.max(delayMs(this.retry, attempt), retryAfterMs), Math.max(this.retry.maxMs, this.retry.minMs)), c.signal);
    }
  }

  /** json does a JSON call: the decoded answer, or null for 204. */
  async json<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T | null> {
    const attempts = Math.max(this.retry.attempts, 1);
    for (let attempt = 0; ; attempt++) {
      const resp = await this.send({ method, path, json: body, signal });
      if (resp.status === 204) {
        await resp.body?.cancel();
        return null;
      }
      let text: string;
      try {
        text = await resp.text();
      } catch (e) {
        // The connection broke while the answer came: retry like before it.
        if (signal?.aborted) throw signal.reason;
        if (attempt + 1 >= attempts) throw makeError("unavailable", `${method} ${path}: answer cut off: ${describe(e)}`, resp.status, `${method} ${path}`, e);
        await sleep(delayMs(this.retry, attempt), signal);
        continue;
      }
      try {
        return JSON.parse(text) as T;
      } catch (e) {
        throw new InternalError("internal", `${method} ${path}: bad answer: ${describe(e)}`, resp.status, `${method} ${path}`, { cause: e });
      }
    }
  }

  private async must<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    const v = await this.json<T>(method, path, body, signal);
    if (v === null) throw new InternalError("internal", `${method} ${path}: no content where an answer was due`, 204, `${method} ${path}`);
    return v;
  }

  // ---- health (no auth) ----

  /** Whether the process serves (GET /healthz); throws UnavailableError when not. */
  async healthy(signal?: AbortSignal): Promise<void> {
    await this.must("GET", "/healthz", undefined, signal);
  }

  /** Whether the store is open and writable (GET /readyz), asked once: false when not. */
  async ready(signal?: AbortSignal): Promise<boolean> {
    try {
      const resp = await this.send({ method: "GET", path: "/readyz", signal, once: true });
      await resp.body?.cancel();
      return true;
    } catch (e) {
      if (e instanceof UnavailableError) return false;
      throw e;
    }
  }

  /** The node's OpenAPI 3.1 description of this API. */
  async openapi(signal?: AbortSignal): Promise<Record<string, unknown>> {
    return this.must("GET", "/api/v1/openapi.json", undefined, signal);
  }

  /**
   * The node's metrics (GET /metrics, no auth) as Prometheus text; read
   * them with parseMetrics. Retried like a JSON call.
   */
  async metrics(signal?: AbortSignal): Promise<string> {
    const resp = await this.send({ method: "GET", path: "/metrics", headers: { Accept: "text/plain" }, signal });
    return resp.text();
  }

  // ---- admin (admin token) ----

  /** Registers a worker node; the answer's token is shown only here. ConflictError if the name exists. */
  registerNode(spec: NodeSpec, signal?: AbortSignal): Promise<RegisteredNode> {
    return this.must("POST", "/api/v1/nodes", spec, signal);
  }

  async listNodes(signal?: AbortSignal): Promise<Node[]> {
    return (await this.must<Node[] | null>("GET", "/api/v1/nodes", undefined, signal)) ?? [];
  }

  pauseNode(id: number, by?: string, signal?: AbortSignal): Promise<Node> {
    return this.must("POST", `/api/v1/nodes/${id}/pause`, by === undefined ? {} : { by }, signal);
  }

  resumeNode(id: number, by?: string, signal?: AbortSignal): Promise<Node> {
    return this.must("POST", `/api/v1/nodes/${id}/resume`, by === undefined ? {} : { by }, signal);
  }

  /** Changes a node's kinds or capacity; what it holds stays its own until released. */
  changeNode(id: number, change: NodeChange, signal?: AbortSignal): Promise<Node> {
    return this.must("PATCH", `/api/v1/nodes/${id}`, change, signal);
  }

  /** Deletes a node and its token; ConflictError while it holds groups unless force. */
  async deleteNode(id: number, o: { force?: boolean; signal?: AbortSignal } = {}): Promise<void> {
    await this.json("DELETE", `/api/v1/nodes/${id}${o.force ? "?force=true" : ""}`, undefined, o.signal);
  }

  /**
   * Gives node id a new token and returns it; the old one is refused from
   * this answer on. The admin token may do it, or the node's own token.
   */
  async rotateNodeToken(id: number, signal?: AbortSignal): Promise<string> {
    return (await this.must<NewToken>("POST", `/api/v1/nodes/${id}/token`, undefined, signal)).token;
  }

  /**
   * Gives the node a new admin token and returns it; the old one and every
   * dashboard session signed in with it are refused from this answer on.
   */
  async rotateAdminToken(signal?: AbortSignal): Promise<string> {
    return (await this.must<NewToken>("POST", "/api/v1/admin/token", undefined, signal)).token;
  }

  /** Creates (created true) or updates a group. */
  async putGroup(name: string, spec: GroupSpec = {}, signal?: AbortSignal): Promise<{ group: Group; created: boolean }> {
    const resp = await this.send({ method: "PUT", path: `/api/v1/groups/${enc(name)}`, json: spec, signal });
    return { group: (await resp.json()) as Group, created: resp.status === 201 };
  }

  /** A page of groups by id; next is "" at the end. */
  listGroups(o: { limit?: number; after?: number | string; signal?: AbortSignal } = {}): Promise<{ groups: Group[]; next: string }> {
    return this.must("GET", `/api/v1/groups${query({ limit: o.limit, after: o.after })}`, undefined, o.signal);
  }

  getGroup(name: string, signal?: AbortSignal): Promise<GroupDetail> {
    return this.must("GET", `/api/v1/groups/${enc(name)}`, undefined, signal);
  }

  /** Plans the tail up to high; returns how many ranges were planned. */
  async planTail(name: string, high: number, signal?: AbortSignal): Promise<number> {
    return (await this.must<{ planned: number }>("POST", `/api/v1/groups/${enc(name)}/tail`, { high }, signal)).planned;
  }

  /** Plans history down to low; returns how many ranges were planned. */
  async planHistory(name: string, low: number, signal?: AbortSignal): Promise<number> {
    return (await this.must<{ planned: number }>("POST", `/api/v1/groups/${enc(name)}/history`, { low }, signal)).planned;
  }

  listRanges(name: string, o: { status?: RangeStatus; limit?: number; after?: number | string; signal?: AbortSignal } = {}): Promise<{ ranges: Range[]; next: string }> {
    return this.must("GET", `/api/v1/groups/${enc(name)}/ranges${query({ status: o.status, limit: o.limit, after: o.after })}`, undefined, o.signal);
  }

  /** Plans a failed range again, attempts reset; ConflictError if it is not failed. */
  retryRange(id: number, signal?: AbortSignal): Promise<Range> {
    return this.must("POST", `/api/v1/ranges/${id}/retry`, undefined, signal);
  }

  /** Puts a new version of the rules (any JSON object); returns the version. */
  async putRules(body: Record<string, unknown>, signal?: AbortSignal): Promise<number> {
    return (await this.must<{ version: number }>("PUT", "/api/v1/rules", body, signal)).version;
  }

  getRules(signal?: AbortSignal): Promise<Rules> {
    return this.must("GET", "/api/v1/rules", undefined, signal);
  }

  findings(signal?: AbortSignal): Promise<Findings> {
    return this.must("GET", "/api/v1/findings", undefined, signal);
  }

  peers(signal?: AbortSignal): Promise<Fleet> {
    return this.must("GET", "/api/v1/peers", undefined, signal);
  }

  /** Lifts a group's quarantine: the same window is handed out again. */
  liftQuarantine(name: string, signal?: AbortSignal): Promise<Group> {
    return this.must("DELETE", `/api/v1/groups/${enc(name)}/quarantine`, undefined, signal);
  }

  /** Drops a group's window and lifts its quarantine; ConflictError while held. */
  dropSnapshot(name: string, signal?: AbortSignal): Promise<Group> {
    return this.must("DELETE", `/api/v1/groups/${enc(name)}/snapshot`, undefined, signal);
  }

  /** Seeds or restores a group's window as an operator; ConflictError while held. */
  putGroupSnapshot(name: string, next: number, body: SnapshotSource, o: SnapshotUpload = {}): Promise<SnapshotStored> {
    return this.putSnapshotAt(`/api/v1/groups/${enc(name)}/snapshot?next=${next}${o.force ? "&force=true" : ""}`, body, o);
  }

  /** Downloads a group's stored snapshot from byte offset on; null when it has none. */
  getGroupSnapshot(name: string, o: { offset?: number; signal?: AbortSignal } = {}): Promise<SnapshotDownload | null> {
    return SnapshotDownload.open(this, `/api/v1/groups/${enc(name)}/snapshot`, o.offset ?? 0, o.signal);
  }

  /**
   * Starts a consistent backup of the node (GET /api/v1/backup, admin
   * token): a tar stream of the catalog as of one commit, the window
   * snapshot files it records and, last, manifest.json with every file's
   * size and sha-256 (what `leasehold backup DIR` writes and `leasehold
   * restore` reads). The answer is not buffered: read the returned
   * BackupDownload once, as chunks or with stream(), or close() it. Tried
   * once, never retried (a backup is one stream). ConflictError while
   * another backup runs; ForbiddenError with a node token.
   */
  async backup(signal?: AbortSignal): Promise<BackupDownload> {
    const resp = await this.send({ method: "GET", path: "/api/v1/backup", headers: { Accept: "application/x-tar" }, signal, once: true });
    return new BackupDownload(resp, signal);
  }

  // ---- worker (node token) ----

  /** Leases a group; null when there is nothing to lease (paused, at capacity, nothing planned in band). */
  lease(signal?: AbortSignal): Promise<Grant | null> {
    return this.json("POST", "/api/v1/leases", undefined, signal);
  }

  /**
   * The range to work on in group: the one in work, or the lowest planned.
   * null when caught up: upload the window and release. With finished, that
   * range is finished in the same write (refused: nothing changes).
   */
  async next(group: number, fence: number, o: { finished?: { range: number; headers?: number }; signal?: AbortSignal } = {}): Promise<NextRange | null> {
    const body: Record<string, unknown> = { fence };
    if (o.finished) body["finished"] = o.finished;
    const out = await this.json<{ range: NextRange }>("POST", `/api/v1/leases/${group}/next`, body, o.signal);
    return out && { ...out.range, group_id: group };
  }

  /** Keeps the lease alive; returns its TTL in seconds. */
  async heartbeat(group: number, fence: number, signal?: AbortSignal): Promise<number> {
    return (await this.must<{ ttl_s: number }>("POST", `/api/v1/leases/${group}/heartbeat`, { fence }, signal)).ttl_s;
  }

  /** Moves the resume point of a range; UnprocessableError if it goes backwards or past end+1. */
  progress(id: number, fence: number, next: number, signal?: AbortSignal): Promise<Range> {
    return this.must("POST", `/api/v1/ranges/${id}/progress`, { fence, next }, signal);
  }

  /** Marks a range done with how many headers it indexed. */
  finish(id: number, fence: number, headers: number, signal?: AbortSignal): Promise<Range> {
    return this.must("POST", `/api/v1/ranges/${id}/finish`, { fence, headers }, signal);
  }

  /**
   * Gives the group back; its range in work is planned again at its resume
   * point. With `stopped`, the holder stops cleanly with its progress and
   * window saved: the range also gets back the attempt its lease counted,
   * so stopping and starting workers never fails a range. The third
   * argument may be the signal alone, as before.
   */
  async release(group: number, fence: number, o: ReleaseOptions | AbortSignal = {}): Promise<void> {
    const { stopped, signal } = o instanceof AbortSignal ? { stopped: false, signal: o } : o;
    const body: Record<string, unknown> = { fence };
    if (stopped) body["stopped"] = true;
    await this.json("POST", `/api/v1/leases/${group}/release`, body, signal);
  }

  /** Gives the group back because its window would not load: the node quarantines it. */
  async releaseUnreadable(group: number, fence: number, windowError: string, signal?: AbortSignal): Promise<void> {
    await this.json("POST", `/api/v1/leases/${group}/release`, { fence, window_error: errorText(windowError) }, signal);
  }

  /** Says why a range cannot be indexed: retried at its resume point unless retry is false. */
  failRange(id: number, fence: number, error: string, retry = true, signal?: AbortSignal): Promise<Range> {
    return this.must("POST", `/api/v1/ranges/${id}/fail`, { fence, error: errorText(error), retry }, signal);
  }

  /** Streams the held group's window snapshot, covering every id below next. */
  putSnapshot(group: number, fence: number, next: number, body: SnapshotSource, o: SnapshotUpload = {}): Promise<SnapshotStored> {
    return this.putSnapshotAt(`/api/v1/leases/${group}/snapshot?fence=${fence}&next=${next}`, body, o);
  }

  /** Downloads the held group's window snapshot from byte offset on; null when it has none. */
  getSnapshot(group: number, fence: number, o: { offset?: number; signal?: AbortSignal } = {}): Promise<SnapshotDownload | null> {
    return SnapshotDownload.open(this, `/api/v1/leases/${group}/snapshot?fence=${fence}`, o.offset ?? 0, o.signal);
  }

  /** Active groups whose water marks are oldest, for a worker to ask its source about. */
  async watermarks(limit?: number, signal?: AbortSignal): Promise<Watermark[]> {
    return (await this.must<{ groups: Watermark[] }>("GET", `/api/v1/watermarks${query({ limit })}`, undefined, signal)).groups ?? [];
  }

  /** The kinds of group this node token's node reads: the kinds water marks are listed for. */
  async kinds(signal?: AbortSignal): Promise<string[]> {
    return (await this.must<{ kinds: string[] }>("GET", "/api/v1/watermarks?limit=1", undefined, signal)).kinds ?? [];
  }

  /** Reports that a group's source cannot be read, with what it said (1-4096 bytes). ForbiddenError for a group not of this node's kinds. */
  async reportSourceError(name: string, error: string, signal?: AbortSignal): Promise<void> {
    await this.must("POST", `/api/v1/groups/${enc(name)}/watermark`, { error }, signal);
  }

  /** Reports a group's water marks as the source gave them; returns how many ranges the tail planned. */
  async reportWatermark(name: string, low: number, high: number, signal?: AbortSignal): Promise<number> {
    return (await this.must<WatermarkReport>("POST", `/api/v1/groups/${enc(name)}/watermark`, { low, high }, signal)).planned;
  }

  private async putSnapshotAt(path: string, body: SnapshotSource, o: SnapshotUpload): Promise<SnapshotStored> {
    const headers: Record<string, string> = { "Content-Type": o.gzip ? "application/gzip" : "application/octet-stream" };
    if (o.digest) headers["Repr-Digest"] = formatReprDigest(o.digest);
    const resp = await this.send({ method: "PUT", path, body, headers, signal: o.signal });
    return (await resp.json()) as SnapshotStored;
  }
}

/** The range Next hands out. */
export interface NextRange {
  id: number;
  group_id: number;
  start: number;
  end: number;
  next: number;
  [k: string]: unknown;
}

/**
 * A snapshot download: the stored gzip bytes from offset on, as an async
 * iterable of chunks (or a ReadableStream with stream()). A connection
 * broken in the middle is resumed with a Range request for the rest of the
 * same snapshot (checked by its ETag). When the download starts at 0,
 * reading to the end checks the sha-256 and the length, and the last read
 * throws on a mismatch.
 */
export class SnapshotDownload implements AsyncIterable<Uint8Array> {
  /** The id the window covers up to (exclusive). */
  next = 0;
  /** The whole stored snapshot's length, -1 if unknown. */
  size = -1;
  /** The hex sha-256 of the stored bytes, "" if not sent. */
  sha256 = "";
  /** The version of the snapshot. */
  etag = "";
  /** Bytes read so far, the offset included. */
  position: number;
  /** How many times a broken download was resumed. */
  resumes = 0;

  private resp: Response | null;
  private used = false;

  private constructor(
    private readonly client: Client,
    private readonly path: string,
    readonly offset: number,
    resp: Response,
    private readonly signal?: AbortSignal,
  ) {
    this.position = offset;
    this.resp = resp;
    this.next = Number(resp.headers.get("X-Snapshot-Next") ?? 0);
    this.etag = resp.headers.get("ETag") ?? "";
    this.sha256 = parseReprDigest(resp.headers.get("Repr-Digest"));
    this.size = totalSize(resp, offset);
  }

  static async open(client: Client, path: string, offset: number, signal?: AbortSignal): Promise<SnapshotDownload | null> {
    const resp = await SnapshotDownload.request(client, path, offset, "", signal);
    return resp && new SnapshotDownload(client, path, offset, resp, signal);
  }

  private static async request(client: Client, path: string, pos: number, etag: string, signal?: AbortSignal): Promise<Response | null> {
    const headers: Record<string, string> = { Accept: "application/gzip" };
    if (pos > 0) {
      headers["Range"] = `bytes=${pos}-`;
      if (etag) headers["If-Range"] = etag;
    }
    const resp = await client.send({ method: "GET", path, headers, signal });
    if (resp.status === 204) {
      await resp.body?.cancel();
      if (pos > 0 && etag) throw new ConflictError("conflict", "snapshot was removed during the download", 204, `GET ${path}`);
      return null;
    }
    if (pos > 0 && resp.status !== 206) {
      await resp.body?.cancel();
      if (etag) throw new ConflictError("conflict", "snapshot changed during the download; start again", resp.status, `GET ${path}`);
      throw new InternalError("internal", `node ignored the Range of a resumed download (${resp.status})`, resp.status, `GET ${path}`);
    }
    return resp;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    if (this.used) throw new Error("a SnapshotDownload is read once");
    this.used = true;
    const hash = this.offset === 0 && this.sha256 ? createHash("sha256") : null;
    let broken = 0;
    for (;;) {
      if (!this.resp) {
        if (broken >= Math.max(this.client.retry.attempts, 1)) {
          throw new UnavailableError("unavailable", `snapshot download broke at byte ${this.position} and did not resume`);
        }
        await sleep(delayMs(this.client.retry, broken), this.signal);
        broken++;
        const resp = await SnapshotDownload.request(this.client, this.path, this.position, this.etag, this.signal);
        if (!resp) throw new ConflictError("conflict", "snapshot was removed during the download");
        const e = resp.headers.get("ETag");
        if (this.etag && e && e !== this.etag) {
          await resp.body?.cancel();
          throw new ConflictError("conflict", "snapshot changed during the download; start again");
        }
        this.resp = resp;
        this.resumes++;
      }
      try {
        for await (const chunk of this.resp.body as unknown as AsyncIterable<Uint8Array>) {
          this.position += chunk.length;
          if (chunk.length > 0) broken = 0;
          hash?.update(chunk);
          yield chunk;
        }
      } catch (e) {
        if (this.signal?.aborted) throw this.signal.reason;
        this.resp = null; // broken: resume where it broke
        continue;
      }
      this.resp = null;
      if (this.size >= 0 && this.position < this.size) continue; // ended short: resume
      break;
    }
    if (this.size >= 0 && this.position !== this.size) {
      throw new InternalError("internal", `snapshot download got ${this.position} bytes of ${this.size}`);
    }
    if (hash) {
      const got = hash.digest("hex");
      if (got !== this.sha256) throw new InternalError("internal", `snapshot digest mismatch: got sha-256 ${got}, node has ${this.sha256}`);
    }
  }

  /** The download as a web ReadableStream. */
  stream(): ReadableStream<Uint8Array> {
    return readableStream(this[Symbol.asyncIterator]());
  }

  /** Ends the download early. */
  async close(): Promise<void> {
    this.used = true;
    await this.resp?.body?.cancel().catch(() => {});
    this.resp = null;
  }
}

/**
 * A backup as it streams from the node: the tar bytes, as an async
 * iterable of chunks (or a ReadableStream with stream()), read once. A
 * stream the node stops (a file it could not read) or a connection that
 * breaks ends in an error on the last read, never as if whole: a tar
 * without manifest.json at its end is not a backup.
 */
export class BackupDownload implements AsyncIterable<Uint8Array> {
  /** Bytes of the files in the backup (X-Backup-Bytes; the tar is a little longer), -1 if not sent. */
  readonly bytes: number;
  /** How many files the backup holds, manifest.json not counted (X-Backup-Files), -1 if not sent. */
  readonly files: number;
  /** The file name the node suggests (leasehold-<catalog id>-<unix time>.tar), "" if none. */
  readonly filename: string;
  /** Tar bytes read so far. */
  position = 0;

  private used = false;

  constructor(
    private readonly resp: Response,
    private readonly signal?: AbortSignal,
  ) {
    this.bytes = headerNumber(resp.headers.get("X-Backup-Bytes"));
    this.files = headerNumber(resp.headers.get("X-Backup-Files"));
    this.filename = /filename="([^"]*)"/.exec(resp.headers.get("Content-Disposition") ?? "")?.[1] ?? "";
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    if (this.used) throw new Error("a BackupDownload is read once");
    this.used = true;
    try {
      for await (const chunk of this.resp.body as unknown as AsyncIterable<Uint8Array>) {
        this.position += chunk.length;
        yield chunk;
      }
    } catch (e) {
      if (this.signal?.aborted) throw this.signal.reason;
      throw makeError("unprocessable", `the backup stream broke off at byte ${this.position} (the node stopped it, its log says why, or the connection broke): ${describe(e)}`, this.resp.status, "GET /api/v1/backup", e);
    }
  }

  /** The backup as a web ReadableStream (pipe it to a file with stream.Readable.fromWeb). */
  stream(): ReadableStream<Uint8Array> {
    return readableStream(this[Symbol.asyncIterator]());
  }

  /** Ends the backup early; the node stops it and frees its copy of the catalog. */
  async close(): Promise<void> {
    this.used = true;
    await this.resp.body?.cancel().catch(() => {});
  }
}

/** readableStream reads it as a web ReadableStream, a chunk a pull; cancelling it ends it. */
function readableStream(it: AsyncIterator<Uint8Array>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      const r = await it.next();
      if (r.done) ctrl.close();
      else ctrl.enqueue(r.value);
    },
    async cancel() {
      await it.return?.();
    },
  });
}

function headerNumber(v: string | null): number {
  const n = v === null || v === "" ? NaN : Number(v);
  return Number.isFinite(n) ? n : -1;
}

/** One sample of a Prometheus text exposition. */
export interface MetricSample {
  /** The sample's name, with any _bucket, _sum, _count or _total suffix. */
  name: string;
  labels: Record<string, string>;
  value: number;
}

/**
 * parseMetrics reads Prometheus text (what metrics() returns) into its
 * samples, in order; comments (# HELP, # TYPE) are skipped. Throws
 * InternalError on a line it cannot read.
 */
export function parseMetrics(text: string): MetricSample[] {
  const out: MetricSample[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$/.exec(line);
    if (!m) throw new InternalError("internal", `not a Prometheus sample: ${line}`);
    const labels: Record<string, string> = {};
    const re = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?/gy;
    const body = m[2] ?? "";
    let l: RegExpExecArray | null;
    let end = 0;
    while (end < body.length && (l = re.exec(body)) !== null) {
      labels[l[1]!] = l[2]!.replace(/\\(["\\n])/g, (_, c: string) => (c === "n" ? "\n" : c));
      end = re.lastIndex;
    }
    if (body.slice(end).trim() !== "") throw new InternalError("internal", `bad labels in a Prometheus sample: ${line}`);
    const v = m[3]!;
    out.push({ name: m[1]!, labels, value: v === "+Inf" ? Infinity : v === "-Inf" ? -Infinity : Number(v) });
  }
  return out;
}

/** metricValue is the value of the first sample named name whose labels include labels, or undefined. */
export function metricValue(samples: MetricSample[], name: string, labels: Record<string, string> = {}): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}

function totalSize(resp: Response, offset: number): number {
  const len = resp.headers.get("Content-Length");
  if (resp.status === 206) {
    const cr = resp.headers.get("Content-Range") ?? "";
    const total = Number(cr.slice(cr.lastIndexOf("/") + 1));
    if (cr.includes("/") && Number.isFinite(total)) return total;
    return len === null ? -1 : offset + Number(len);
  }
  return len === null ? -1 : Number(len);
}

function query(q: Record<string, string | number | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== "") p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : "";
}

/** The longest error text a worker may report. */
export const MAX_ERROR_BYTES = 4096;

/** errorText fits an error's text to 1..4096 bytes of UTF-8, cut at a character. */
export function errorText(s: string): string {
  if (!s) return "(no error text)";
  const b = Buffer.from(s, "utf8");
  if (b.length <= MAX_ERROR_BYTES) return s;
  let cut = MAX_ERROR_BYTES;
  while (cut > 0 && (b[cut]! & 0xc0) === 0x80) cut--;
  return b.subarray(0, cut).toString("utf8");
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as { cause?: unknown }).cause;
    return cause instanceof Error ? `${e.message}: ${cause.message}` : e.message;
  }
  return String(e);
}
