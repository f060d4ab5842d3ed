// The pull loop of a worker node, as client's Worker: it leases up to
// capacity groups at once and, for each, loads the group's window snapshot
// (or starts an empty window at the group's first range, uploaded at once
// so a crash before the next upload loses nothing), takes the group's
// ranges in order and feeds them to index, reports progress and heartbeats
// every TTL/3, finishes each range, uploads the window every
// snapshotIntervalMs, and when the group is caught up uploads the window
// and releases the group.
//
// A lost lease aborts that group's index call and the group is forgotten:
// nothing more is sent for it. An error from index fails the range at the
// node with the error's text (retried unless it is a PermanentError), and
// the group is given back with its window up to the progress. A window
// snapshot that will not load (window.load throws, or the stored bytes are
// not gzip) is released with its error as window_error, and the node
// quarantines the group until an operator acts; a download that breaks off
// is released plainly. When run's signal aborts, the running index calls
// see their signal abort, and every held group's progress and window are
// sent and the group released as stopped (its range gets back the attempt
// its lease counted; released plainly if either could not be sent).

import { createHash } from "node:crypto";
import { Readable, Transform } from "node:stream";
import { createGunzip, createGzip } from "node:zlib";

import { Client, delayMs, sleep, type NextRange } from "./client.js";
import { ForbiddenError, LeaseLostError, LeaseholdError, PermanentError, UnauthorizedError, UnprocessableError } from "./errors.js";
import type { Grant, Snapshot } from "./types.js";

/** The state a worker carries through a group from range to range. */
export interface Window {
  /** Replaces the window with what save wrote (the bytes, decompressed). */
  load(input: AsyncIterable<Uint8Array>): Promise<void> | void;
  /** Writes the window whole: bytes, text or chunks (the loop gzips them). */
  save(): Uint8Array | string | AsyncIterable<Uint8Array> | Promise<Uint8Array | string>;
}

/** Reports how far index got: every id below next is in the window. Cheap; sent with the next heartbeat. */
export type ProgressFunc = (next: number, headers: number) => void;

export interface IndexCall<W extends Window> {
  /** Aborts when the lease is lost (reason: a LeaseLostError) or the worker stops. */
  signal: AbortSignal;
  /**
   * The lease: grant.group.name and grant.fence are what a store outside
   * the node checks writes by (docs/SHARED-INDEX.md). When the store
   * refuses a write for an older fence, throw a LeaseLostError: the group
   * is given up as lost, its range not finished.
   */
  grant: Grant;
  range: NextRange;
  window: W;
  progress: ProgressFunc;
}

/**
 * Indexes ids range.next..range.end into the window. Resolves when the
 * whole range is in the window; must settle soon after signal aborts. Ids
 * may come again after a takeover: indexing an id twice must leave the
 * window as indexing it once. Throwing fails the range at the node with
 * the error's text (retried; a PermanentError fails it at once).
 */
export type IndexFunc<W extends Window> = (call: IndexCall<W>) => Promise<void>;

export interface Logger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** A logger of logfmt lines on stderr. */
export const stderrLogger: Logger = {
  info: (m, f) => log("INFO", m, f),
  warn: (m, f) => log("WARN", m, f),
  error: (m, f) => log("ERROR", m, f),
};

function log(level: string, msg: string, f: Record<string, unknown> = {}) {
  const kv = Object.entries(f).map(([k, v]) => `${k}=${JSON.stringify(v instanceof Error ? v.message : v)}`);
  process.stderr.write(`time=${new Date().toISOString()} level=${level} msg=${JSON.stringify(msg)} ${kv.join(" ")}\n`);
}

export interface WorkerOptions<W extends Window> {
  /** Calls the node with the worker node's token. */
  client: Client;
  /** How many groups to hold at once, read before every lease; default 1. */
  capacity?: number | (() => number);
  /** The empty window of a group. */
  newWindow(group: Grant["group"]): W;
  /** Does the work of one range. */
  index: IndexFunc<W>;
  logger?: Logger;
  /** Upload the window between ranges this long after the last upload (default 60 s; below 0: only when caught up or stopping). */
  snapshotIntervalMs?: number;
  /** The wait between leases while the node has nothing to lease (default 500 ms to 4 s). */
  poll?: { minMs: number; maxMs: number };
  /** Bounds the uploads and releases after run's signal aborts (default 30 s). */
  stopTimeoutMs?: number;
  /**
   * The most a downloaded window may expand to (default 2 GiB, what a node
   * takes by default): a few bytes of gzip may say gigabytes, and a window
   * past it does not load (released as window_error).
   */
  maxWindowBytes?: number;
  /**
   * More nodes of the same fleet, asked in order after client when it
   * cannot be reached (refused, reset, timed out, 502/503/504); each with
   * the same worker node's token (registered at any node of the fleet, it
   * works at every node). A group is worked only at the node that
   * granted it: its fence and id are that node's.
   */
  failover?: Client[];
  /** How long a node that could not be reached is passed over before leases try it again (default 15 s). */
  reprobeMs?: number;
}

/** How long a node that could not be reached is passed over unless WorkerOptions.reprobeMs says otherwise. */
export const DEFAULT_REPROBE_MS = 15_000;

/**
 * Whether an error says the node could not serve the call at all, so
 * another node of the fleet should be asked: no connection, a timeout, or
 * 502, 503 or 504.
 */
export function unreachable(e: unknown): boolean {
  if (!(e instanceof LeaseholdError)) return false;
  if (e.status === 502 || e.status === 503 || e.status === 504) return true;
  return e.status === 0 && e.code === "unavailable";
}

/** A node a worker leases at, and until when it is passed over. */
interface FleetNode {
  client: Client;
  lease: Client; // client with fewer retries: the next node is the better retry
  downUntil: number; // 0: up
}

/** One hold of a group by name, from its grant to its end. */
interface Tenure {
  done: Promise<void>;
  hold: Hold<Window> | null;
  lostWhy: unknown;
}

/** What a window may expand to unless WorkerOptions.maxWindowBytes says otherwise. */
export const DEFAULT_MAX_WINDOW_BYTES = 2 * 2 ** 30;

type Outcome = "caughtUp" | "stopped" | "failed" | "suspect" | "lost" | "unreadable";

const FALLBACK_TTL_MS = 60_000;

export class Worker<W extends Window = Window> {
  private readonly o: WorkerOptions<W>;
  private heldNow = 0;
  private failures = 0;
  private ended: (() => void) | null = null;
  private readonly nodes: FleetNode[];
  private lastNode: FleetNode | null = null;
  private readonly tenures = new Map<string, Tenure>();

  constructor(o: WorkerOptions<W>) {
    if (!o.client || !o.index || !o.newWindow) throw new Error("Worker needs client, index and newWindow");
    this.o = o;
    const more = o.failover ?? [];
    this.nodes = [o.client, ...more].map((c) => ({
      client: c,
      lease: more.length > 0 ? c.withToken(c.token, { retry: { ...c.retry, attempts: Math.min(Math.max(c.retry.attempts, 1), 2) } }) : c,
      downUntil: 0,
    }));
  }

  private get reprobeMs(): number {
    return this.o.reprobeMs && this.o.reprobeMs > 0 ? this.o.reprobeMs : DEFAULT_REPROBE_MS;
  }

  /**
   * Asks the nodes in order, passing over those marked down (all of them
   * when every one is), for a grant; resolves with the grant (or null:
   * nothing to lease) and the node that answered. Throws the last error
   * when none could be reached or let the token in, or an answer that is
   * about neither.
   */
  private async leaseAny(signal: AbortSignal): Promise<{ grant: Grant | null; node: FleetNode }> {
    const now = Date.now();
    let order = this.nodes.filter((n) => n.downUntil <= now);
    if (order.length === 0) order = this.nodes;
    let last: unknown = null;
    for (const n of order) {
      try {
        const grant = await n.lease.lease(signal);
        if (n.downUntil !== 0) this.log.info("node reachable again; leasing there", { url: n.client.url });
        n.downUntil = 0;
        if (this.lastNode && this.lastNode !== n && this.nodes.length > 1) this.log.info("leasing at another node of the fleet", { url: n.client.url, was: this.lastNode.client.url });
        this.lastNode = n;
        return { grant, node: n };
      } catch (e) {
        // A token registered at one node of a fleet is let in at another
        // once that one has folded it: a node that refuses it (behind, or
        // holding another node of the name) is passed over too. Refused by
        // every node, the token is refused.
        const refused = this.nodes.length > 1 && (e instanceof UnauthorizedError || e instanceof ForbiddenError);
        if (signal.aborted || !(unreachable(e) || refused)) throw e;
        const why = refused ? "node refuses the token; leasing at the next node of the fleet" : "node unreachable; leasing at the next node of the fleet";
        if (n.downUntil === 0 && this.nodes.length > 1) this.log.warn(why, { url: n.client.url, retry_after_ms: this.reprobeMs, err: e });
        n.downUntil = Date.now() + this.reprobeMs;
        last = e;
      }
    }
    throw last;
  }

  /** How many groups the worker holds now. */
  get held(): number {
    return this.heldNow;
  }

  get log(): Logger {
    return this.o.logger ?? stderrLogger;
  }

  private capacity(): number {
    const c = this.o.capacity;
    return c === undefined ? 1 : typeof c === "function" ? c() : c;
  }

  private get poll() {
    // The cap is low: work can come at any moment without a plan at this
    // node (a peer hands a group over, a dead peer's groups are adopted).
    return this.o.poll ?? { minMs: 500, maxMs: 4_000 };
  }

  get stopTimeoutMs(): number {
    return this.o.stopTimeoutMs && this.o.stopTimeoutMs > 0 ? this.o.stopTimeoutMs : 30_000;
  }

  get snapshotIntervalMs(): number {
    return this.o.snapshotIntervalMs === undefined || this.o.snapshotIntervalMs === 0 ? 60_000 : this.o.snapshotIntervalMs;
  }

  /**
   * Leases and works until signal aborts, then lets the running index calls
   * see their signal abort, uploads their windows, releases every group
   * and resolves. Rejects, after stopping the same way, when the node
   * (every node, with failover) refuses the token (UnauthorizedError,
   * ForbiddenError).
   */
  async run(signal: AbortSignal): Promise<void> {
    const stop = new AbortController();
    const onAbort = () => stop.abort(signal.reason);
    if (signal.aborted) return;
    signal.addEventListener("abort", onAbort, { once: true });
    const holds = new Set<Promise<void>>();
    let idle = 0;
    let saidIdle = false;
    let refused: unknown = null;
    try {
      while (!stop.signal.aborted) {
        if (this.heldNow >= this.capacity()) {
          await this.waitForEnd(this.poll.minMs, stop.signal);
          continue;
        }
        let grant: Grant | null = null;
        let at: FleetNode | null = null;
        try {
          ({ grant, node: at } = await this.leaseAny(stop.signal));
        } catch (e) {
          if (e instanceof UnauthorizedError || e instanceof ForbiddenError) {
            this.log.error("the node refuses the token; stopping", { err: e });
            refused = e;
            stop.abort(e);
            break;
          }
          if (!stop.signal.aborted) this.log.warn("lease failed", { err: e });
        }
        if (!grant || !at) {
          if (at && !saidIdle && this.heldNow === 0) {
            // Once per idle stretch, not per poll.
            saidIdle = true;
            this.log.info("idle: the node has nothing to lease in this worker's band and kinds; asking again until it has", { url: at.client.url, poll_max_ms: this.poll.maxMs });
          }
          // Paused, nothing planned, at the node's capacity or unreachable:
          // back off, never spin; a hold that ends frees a slot: ask then.
          if (await this.waitForEnd(delayMs({ ...this.poll, attempts: 1 }, idle), stop.signal)) idle = 0;
          else idle++;
          continue;
        }
        idle = 0;
        saidIdle = false;
        this.heldNow++;
        const g = grant;
        const node = at.client;
        let endTenure!: () => void;
        const tenure: Tenure = { done: new Promise<void>((r) => (endTenure = r)), hold: null, lostWhy: null };
        const prev = this.tenures.get(g.group.name);
        this.tenures.set(g.group.name, tenure);
        const p = (async () => {
          try {
            if (prev) {
              // Granted anew at another node while an older hold of it
              // (from a node gone quiet) still runs: that one is lost by
              // the rules; it ends before this one starts.
              const why = new LeaseLostError("lease_lost", `group ${JSON.stringify(g.group.name)} granted again at ${node.url}`, 409, "");
              if (prev.hold) prev.hold.lose(why);
              else prev.lostWhy = why;
              await prev.done;
            }
            const out = await this.hold(stop.signal, g, node, tenure);
            if (out === "failed" || out === "suspect" || out === "unreadable") {
              // A failure that repeats is not retried in a tight loop.
              this.failures++;
              await sleep(delayMs({ ...this.poll, attempts: 1 }, this.failures - 1), stop.signal).catch(() => {});
            } else if (out === "caughtUp") {
              this.failures = 0;
            }
          } catch (e) {
            this.log.error("hold ended with an error", { group: g.group.name, err: e });
          } finally {
            if (this.tenures.get(g.group.name) === tenure) this.tenures.delete(g.group.name);
            endTenure();
            this.heldNow--;
            this.ended?.();
          }
        })();
        holds.add(p);
        void p.finally(() => holds.delete(p));
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      if (!stop.signal.aborted) stop.abort();
      await Promise.all([...holds]);
    }
    if (refused) throw refused;
  }

  /** Waits ms or until a hold ends (true) or signal aborts. */
  private waitForEnd(ms: number, signal: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (v: boolean) => {
        clearTimeout(t);
        signal.removeEventListener("abort", onAbort);
        this.ended = null;
        resolve(v);
      };
      const onAbort = () => done(false);
      const t = setTimeout(() => done(false), ms);
      this.ended = () => done(true);
      if (signal.aborted) done(false);
      else signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Works one leased group until caught up, lost, failed or stopped, and lets it go as the outcome says. */
  private async hold(parent: AbortSignal, g: Grant, node: Client, tenure: Tenure): Promise<Outcome> {
    const h = new Hold<W>(this, g, node);
    tenure.hold = h as unknown as Hold<Window>;
    if (tenure.lostWhy) h.lose(tenure.lostWhy);
    this.log.info("leased group", { group: g.group.name, fence: g.fence, snapshot_next: g.snapshot?.next ?? 0, takeover: !!g.takeover, ttl_s: g.ttl_s });
    const onParent = () => h.work.abort(parent.reason);
    parent.addEventListener("abort", onParent, { once: true });
    if (parent.aborted) onParent();
    const beats = new AbortController();
    const beating = h.heartbeats(beats.signal);
    let out: Outcome;
    try {
      out = await h.run();
    } finally {
      parent.removeEventListener("abort", onParent);
    }
    try {
      const endSignal = parent.aborted ? AbortSignal.timeout(this.stopTimeoutMs) : undefined;
      if (parent.aborted && out !== "lost" && out !== "suspect" && out !== "unreadable") out = "stopped";
      if (out === "lost" || h.lost) {
        this.log.warn("lease lost; group forgotten", { group: g.group.name });
        return "lost";
      }
      // saved is a stop that handed its progress and window back whole:
      // the node does not count its lease as an attempt of the range.
      let saved = out === "stopped";
      if (out !== "suspect" && out !== "unreadable") {
        saved = (await h.flushProgress(endSignal)) && saved;
        if (h.dirty) {
          try {
            await h.upload(endSignal);
          } catch (e) {
            if (h.lost || e instanceof LeaseLostError) {
              this.log.warn("lease lost; group forgotten", { group: g.group.name });
              return "lost";
            }
            this.log.error("window upload failed; releasing anyway", { group: g.group.name, err: e });
            saved = false;
          }
        }
      }
      try {
        if (out === "unreadable") await node.releaseUnreadable(g.group.id, g.fence, h.windowError, endSignal);
        else await node.release(g.group.id, g.fence, { stopped: saved, signal: endSignal });
      } catch (e) {
        if (e instanceof LeaseLostError) {
          this.log.warn("lease lost before release", { group: g.group.name });
          return "lost";
        }
        this.log.error("release failed; the TTL will free the group", { group: g.group.name, err: e });
        return out;
      }
      const why = { caughtUp: "caught up", stopped: "stopping", failed: "failed", suspect: "suspect window", lost: "lost", unreadable: "unreadable window" }[out];
      this.log.info("released group", { group: g.group.name, why });
      return out;
    } finally {
      beats.abort();
      await beating;
    }
  }

  get options(): WorkerOptions<W> {
    return this.o;
  }
}

/** A promise-chain lock: orders a range's progress after its next and before its finish. */
class Lock {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.tail.then(fn, fn);
    this.tail = p.catch(() => {});
    return p;
  }
}

/** One held group: its grant, its window and what has been reported of the range in work. */
class Hold<W extends Window> {
  readonly work = new AbortController();
  lost = false;
  ttlMs: number;
  contact = Date.now();
  window!: W;
  windowNext: number | null = null;
  windowError = "";
  dirty = false;
  lastSnapshot = Date.now();

  private readonly calls = new Lock();
  private rng: NextRange | null = null;
  private pending = 0;
  private sent = 0;
  private headers = 0;

  constructor(
    private readonly w: Worker<W>,
    private readonly g: Grant,
    /** The node that granted g: every holder call goes there. */
    private readonly node: Client,
  ) {
    this.ttlMs = g.ttl_s > 0 ? g.ttl_s * 1000 : FALLBACK_TTL_MS;
  }

  private get client(): Client {
    return this.node;
  }

  private get log(): Logger {
    return this.w.log;
  }

  private touch() {
    this.contact = Date.now();
  }

  lose(err: unknown) {
    if (this.lost) return;
    this.lost = true;
    this.log.warn("lease lost; aborting the group's work", { group: this.g.group.name, err });
    this.work.abort(err instanceof LeaseLostError ? err : new LeaseLostError("lease_lost", "lease lost", 409, "", { cause: err }));
  }

  /** The outcome of an error of the work. */
  private judge(err: unknown, what: string): Outcome {
    if (this.lost || err instanceof LeaseLostError) {
      this.lose(err);
      return "lost";
    }
    if (this.work.signal.aborted) return "stopped";
    if (what !== "index") this.log.error(`${what} failed; releasing the group`, { group: this.g.group.name, err });
    return "failed";
  }

  /** Loads the window and runs the group's ranges until caught up, lost, stopped or failed. */
  async run(): Promise<Outcome> {
    const loaded = await this.loadWindow();
    if (loaded) return loaded;
    const signal = this.work.signal;
    for (;;) {
      let r: NextRange | null;
      try {
        r = await this.client.next(this.g.group.id, this.g.fence, { signal });
      } catch (e) {
        return this.judge(e, "next");
      }
      this.touch();
      if (!r) return "caughtUp";
      if (this.windowNext === null) {
        // An empty window starts at the group's first range, and goes up at
        // once: a crash before the first upload would lose the ranges
        // finished meanwhile from every later window.
        this.windowNext = r.start;
        try {
          await this.upload(signal);
        } catch (e) {
          if (this.lost || e instanceof LeaseLostError) return "lost";
          this.log.warn("upload of the empty window failed; going on", { group: this.g.group.name, err: e });
        }
      }
      this.rng = r;
      this.pending = this.sent = r.next;
      this.headers = 0;
      this.dirty = true;

      let err: unknown = null;
      const range = r;
      const progress: ProgressFunc = (next, headers) => {
        if (this.rng?.id !== range.id) return; // a late call for a range already finished
        next = Math.min(Math.max(next, range.next), range.end + 1);
        this.pending = Math.max(this.pending, next);
        this.headers = headers;
      };
      try {
        await this.w.options.index({ signal, grant: this.g, range: r, window: this.window, progress });
      } catch (e) {
        err = e;
      }
      if (this.lost) return "lost";
      if (err !== null) {
        if (!signal.aborted) this.log.error("index failed; releasing the group", { group: this.g.group.name, range: r.id, err });
        this.windowNext = this.pending;
        const out = this.judge(err, "index");
        if (out === "failed" && !(await this.failRange(r, err))) return "lost";
        return out;
      }
      const fin = await this.finish(r);
      if (fin) return fin;
      const iv = this.w.snapshotIntervalMs;
      if (iv > 0 && Date.now() - this.lastSnapshot >= iv) {
        try {
          await this.upload(signal);
        } catch (e) {
          if (this.lost || e instanceof LeaseLostError) return "lost";
          if (signal.aborted) return "stopped";
          this.log.warn("window upload failed; going on", { group: this.g.group.name, err: e });
        }
      }
    }
  }

  /** Starts the group's window: the snapshot's when there is one. undefined: loaded. */
  private async loadWindow(): Promise<Outcome | undefined> {
    this.window = this.w.options.newWindow(this.g.group);
    if (!this.g.snapshot) return undefined;
    const signal = this.work.signal;
    let dl;
    try {
      dl = await this.client.getSnapshot(this.g.group.id, this.g.fence, { signal });
    } catch (e) {
      return this.judge(e, "snapshot download");
    }
    if (!dl) {
      this.log.warn("lease named a snapshot the node no longer has; starting empty", { group: this.g.group.name });
      return undefined;
    }
    this.touch();
    let downloadErr: unknown = null;
    const source = (async function* () {
      try {
        yield* dl;
      } catch (e) {
        downloadErr = e;
        throw e;
      }
    })();
    const gunzip = createGunzip();
    const input = Readable.from(source);
    input.on("error", (e) => gunzip.destroy(e));
    input.pipe(gunzip);
    // The window as it expands, cut off past the limit.
    const limit = this.w.options.maxWindowBytes ?? DEFAULT_MAX_WINDOW_BYTES;
    let expanded = 0;
    const window = new Transform({
      transform(chunk: Buffer, _enc, done) {
        expanded += chunk.length;
        if (expanded > limit) done(new Error(`the window snapshot expands past the limit of ${limit} bytes`));
        else done(null, chunk);
      },
    });
    gunzip.on("error", (e) => window.destroy(e));
    gunzip.pipe(window);
    try {
      await this.window.load(window);
      // Read to the end, so the download's length and digest are checked.
      for await (const _ of window) void _;
    } catch (e) {
      input.destroy();
      gunzip.destroy();
      window.destroy();
      const out = this.judge(e, "index");
      if (out !== "failed") return out;
      if (downloadErr !== null) {
        this.log.error("window snapshot download failed; releasing the group", { group: this.g.group.name, err: e });
        return "suspect";
      }
      this.log.error("window snapshot did not load; releasing the group for an operator to look at", { group: this.g.group.name, err: e });
      this.windowError = `window did not load: ${e instanceof Error ? e.message : String(e)}`;
      return "unreadable";
    }
    this.windowNext = dl.next || this.g.snapshot.next;
    this.log.info("window loaded", { group: this.g.group.name, next: this.windowNext, bytes: dl.size });
    return undefined;
  }

  /** Tells the node why r could not be indexed, after its last progress. false: the lease is lost. */
  private async failRange(r: NextRange, err: unknown): Promise<boolean> {
    await this.flushProgress(undefined);
    if (this.lost) return false;
    const retry = !(err instanceof PermanentError);
    const text = err instanceof Error ? err.message : String(err);
    try {
      await this.calls.run(async () => {
        this.rng = null;
        await this.client.failRange(r.id, this.g.fence, text, retry);
      });
      this.touch();
      this.log.info("range failed at the node", { group: this.g.group.name, range: r.id, retry });
    } catch (e) {
      if (e instanceof LeaseLostError) {
        this.lose(e);
        return false;
      }
      this.log.warn("range failure not reported", { group: this.g.group.name, range: r.id, err: e });
    }
    return true;
  }

  /** Reports r done, after its last progress; even while stopping, so nobody redoes it. */
  private async finish(r: NextRange): Promise<Outcome | undefined> {
    try {
      await this.calls.run(async () => {
        const headers = this.headers;
        this.rng = null;
        await this.client.finish(r.id, this.g.fence, headers, AbortSignal.timeout(this.w.stopTimeoutMs));
      });
    } catch (e) {
      return this.judge(e, "finish");
    }
    this.touch();
    this.windowNext = r.end + 1;
    return undefined;
  }

  /** Keeps the lease alive every TTL/3 until signal aborts: with progress when there is new progress, else a heartbeat. */
  async heartbeats(signal: AbortSignal): Promise<void> {
    for (;;) {
      const interval = Math.max(this.ttlMs / 3, 10);
      try {
        await sleep(interval, signal);
      } catch {
        return;
      }
      try {
        const sent = await this.sendProgress(signal);
        if (!sent && Date.now() - this.contact >= interval) {
          const ttl = await this.client.heartbeat(this.g.group.id, this.g.fence, signal);
          this.touch();
          if (ttl > 0) this.ttlMs = ttl * 1000;
        }
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof LeaseLostError) {
          this.lose(e);
          return;
        }
        if (Date.now() - this.contact > this.ttlMs) {
          this.lose(new Error(`no answer from the node for a TTL: ${e instanceof Error ? e.message : e}`));
          return;
        }
        this.log.warn("heartbeat failed", { group: this.g.group.name, err: e });
      }
    }
  }

  /** Sends the range's new progress, if any; true if it did. */
  private sendProgress(signal: AbortSignal | undefined): Promise<boolean> {
    return this.calls.run(async () => {
      const r = this.rng;
      const next = this.pending;
      if (!r || next <= this.sent) return false;
      try {
        await this.client.progress(r.id, this.g.fence, next, signal);
      } catch (e) {
        if (e instanceof UnprocessableError) return false; // the node is past this point already
        throw e;
      }
      this.touch();
      this.sent = Math.max(this.sent, next);
      return true;
    });
  }

  /** Sends the last progress before an upload or release, so the range resumes where the window ends; false if it could not. */
  async flushProgress(signal: AbortSignal | undefined): Promise<boolean> {
    try {
      await this.sendProgress(signal);
      return true;
    } catch (e) {
      if (e instanceof LeaseLostError) this.lose(e);
      else this.log.warn("last progress not sent", { group: this.g.group.name, err: e });
      return false;
    }
  }

  /** Saves the window gzipped and streams it as the snapshot at windowNext; save runs again on a retry. */
  async upload(signal: AbortSignal | undefined): Promise<void> {
    const retry = this.client.retry;
    for (let attempt = 0; ; attempt++) {
      if (this.lost) throw new LeaseLostError("lease_lost", "lease lost");
      let err: unknown;
      try {
        const hash = createHash("sha256");
        const body = gzipped(await this.window.save(), hash);
        const s: Snapshot = await this.client.putSnapshot(this.g.group.id, this.g.fence, this.windowNext ?? 0, body, { gzip: true, signal });
        const sum = hash.digest("hex");
        if (s.sha256 && s.sha256 !== sum) throw new LeaseholdError("internal", `node stored sha-256 ${s.sha256}, sent ${sum}`);
        this.touch();
        this.dirty = false;
        this.lastSnapshot = Date.now();
        this.log.info("window uploaded", { group: this.g.group.name, next: s.next, bytes: s.size });
        return;
      } catch (e) {
        err = e;
      }
      const code = err instanceof LeaseholdError ? err.code : "internal";
      if ((code !== "unavailable" && code !== "internal") || attempt + 1 >= retry.attempts || signal?.aborted) throw err;
      await sleep(delayMs(retry, attempt), signal);
    }
  }
}

/** The window's bytes, gzipped on the way, hashed as sent. */
async function* gzipped(src: Uint8Array | string | AsyncIterable<Uint8Array>, hash: ReturnType<typeof createHash>): AsyncIterable<Uint8Array> {
  const gz = createGzip();
  const input = typeof src === "string" || src instanceof Uint8Array ? Readable.from([Buffer.from(src as never)]) : Readable.from(src);
  input.on("error", (e) => gz.destroy(e));
  input.pipe(gz);
  for await (const chunk of gz as AsyncIterable<Buffer>) {
    hash.update(chunk);
    yield chunk;
  }
}
