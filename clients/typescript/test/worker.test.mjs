// The worker pull loop against a real node: capacity, windows uploaded
// and loaded, heartbeats, failures reported, a window that will not load
// quarantined, and every group released on stop: as stopped (no attempt
// used) when its progress and window went up, by run's abort signal or a
// worker process's SIGINT or SIGTERM.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { gunzipSync, gzipSync } from "node:zlib";

import { Client, Worker, PermanentError } from "../dist/index.js";
import { startNode, waitFor } from "./node.mjs";
import { IdWindow, slowIndex } from "./window.mjs";

const quiet = { info() {}, warn() {}, error() {} };

async function setup(t, groups, args = []) {
  const node = await startNode(args);
  t.after(() => node.stop());
  const admin = new Client({ url: node.url, token: node.adminToken });
  for (const [name, high] of groups) {
    await admin.putGroup(name, { range_size: 100, start: 1 });
    await admin.planTail(name, high);
  }
  const reg = await admin.registerNode({ name: "ts-worker", capacity: 4 });
  return { node, admin, client: admin.withToken(reg.token, { retry: { minMs: 20, maxMs: 200, attempts: 5 } }) };
}

function runWorker(t, o) {
  const stop = new AbortController();
  const worker = new Worker({ logger: quiet, poll: { minMs: 20, maxMs: 200 }, newWindow: () => new IdWindow(), ...o });
  const done = worker.run(stop.signal);
  t.after(() => stop.abort());
  return { worker, stop: () => (stop.abort(), done), done };
}

async function windowOf(admin, name) {
  const dl = await admin.getGroupSnapshot(name);
  const parts = [];
  for await (const c of dl) parts.push(Buffer.from(c));
  return { next: dl.next, ids: JSON.parse(gunzipSync(Buffer.concat(parts)).toString()).ids };
}

test("indexes every range of its groups, at most capacity at once, and releases them caught up", async (t) => {
  const { admin, client } = await setup(t, [["ts.a", 1000], ["ts.b", 1000], ["ts.c", 500]]);
  let most = 0;
  let worker;
  const w = runWorker(t, {
    client,
    capacity: 2,
    async index({ range, window, progress }) {
      most = Math.max(most, worker.held);
      for (let id = range.next; id <= range.end; id++) window.ids.add(id);
      progress(range.end + 1, range.end + 1 - range.next);
      await new Promise((r) => setImmediate(r));
    },
  });
  worker = w.worker;
  await waitFor("every range done", async () => {
    for (const [g, n] of [["ts.a", 10], ["ts.b", 10], ["ts.c", 5]]) {
      const d = await admin.getGroup(g);
      if (d.ranges.done !== n || d.lease !== null) return false;
    }
    return true;
  });
  await w.stop();
  assert.equal(most, 2, "held two groups at once, never more");
  for (const [g, n] of [["ts.a", 1000], ["ts.b", 1000], ["ts.c", 500]]) {
    const win = await windowOf(admin, g);
    assert.equal(win.next, n + 1);
    assert.equal(win.ids.length, n, `${g}'s window holds each of its ids`);
  }

  // More ids planned: a new worker loads the window and goes on from it.
  await admin.planTail("ts.c", 700);
  let loaded = 0;
  const w2 = runWorker(t, {
    client,
    newWindow: () => new (class extends IdWindow { async load(i) { await super.load(i); loaded = this.ids.size; } })(),
    async index({ range, window, progress }) {
      for (let id = range.next; id <= range.end; id++) window.ids.add(id);
      progress(range.end + 1, 0);
    },
  });
  await waitFor("ts.c caught up again", async () => (await admin.getGroup("ts.c")).ranges.done === 7);
  await waitFor("ts.c released", async () => (await admin.getGroup("ts.c")).lease === null);
  await w2.stop();
  assert.equal(loaded, 500, "the second worker loaded the first one's window");
  assert.equal((await windowOf(admin, "ts.c")).ids.length, 700);
});

test("reports index errors: retried, or failed at once when permanent", async (t) => {
  const { admin, client } = await setup(t, [["ts.fail", 600]]);
  let boomed = false;
  const w = runWorker(t, {
    client,
    async index({ range, window, progress }) {
      if (range.start === 201 && !boomed) {
        boomed = true;
        progress(250, 49);
        throw new Error("source said 502");
      }
      if (range.start === 401) throw new PermanentError("article 401 cannot be parsed");
      for (let id = range.next; id <= range.end; id++) window.ids.add(id);
      progress(range.end + 1, 0);
    },
  });
  await waitFor("all ranges settled", async () => {
    const d = await admin.getGroup("ts.fail");
    return d.ranges.done === 5 && d.ranges.failed === 1 && d.lease === null;
  });
  await w.stop();
  const { ranges } = await admin.listRanges("ts.fail");
  const r201 = ranges.find((r) => r.start === 201);
  const r401 = ranges.find((r) => r.start === 401);
  assert.equal(r201.status, "done");
  assert.equal(r201.last_error, "source said 502");
  assert.equal(r401.status, "failed");
  assert.equal(r401.last_error, "article 401 cannot be parsed");
  assert.equal(r401.attempts, 1, "a permanent error is not retried");
});

test("a window that will not load is released with window_error and quarantined", async (t) => {
  const { admin, client } = await setup(t, [["ts.bad", 300]]);
  await admin.putGroupSnapshot("ts.bad", 101, gzipSync("this is not the window's JSON"), { gzip: true, force: true });
  let indexed = 0;
  const w = runWorker(t, { client, async index() { indexed++; } });
  const q = await waitFor("the group quarantined", async () => (await admin.getGroup("ts.bad")).quarantine);
  await w.stop();
  assert.match(q.error, /^window did not load: /);
  assert.equal(q.node, "ts-worker");
  assert.equal(indexed, 0);
  assert.equal((await admin.getGroup("ts.bad")).lease, null);
});

test("a window that expands past maxWindowBytes does not load: window_error and quarantined", async (t) => {
  const { admin, client } = await setup(t, [["ts.bomb", 300]]);
  // A good window after 4 MiB of blanks (JSON allows them): a few kB of gzip.
  const body = gzipSync(Buffer.concat([Buffer.alloc(4 << 20, " "), Buffer.from(JSON.stringify({ ids: [1, 2, 3] }))]));
  await admin.putGroupSnapshot("ts.bomb", 101, body, { gzip: true, force: true });
  let indexed = 0;
  const w = runWorker(t, { client, maxWindowBytes: 1 << 20, async index() { indexed++; } });
  const q = await waitFor("the group quarantined", async () => (await admin.getGroup("ts.bomb")).quarantine);
  await w.stop();
  assert.match(q.error, /expands past the limit of 1048576 bytes/);
  assert.equal(indexed, 0);
});

test("heartbeats keep a long range's lease, and stopping sends the progress and the window and releases as stopped", async (t) => {
  const { admin, client } = await setup(t, [["ts.long", 300]], ["--lease-ttl", "1s"]);
  let aborted = false;
  const w = runWorker(t, {
    client,
    async index({ signal, range, window, progress }) {
      for (let id = range.next; id < 50; id++) window.ids.add(id);
      progress(50, 49);
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      aborted = true;
      throw signal.reason;
    },
  });
  const first = await waitFor("the progress sent with a heartbeat", async () => {
    const d = await admin.getGroup("ts.long");
    return d.lease && (await admin.listRanges("ts.long")).ranges[0].next === 50 && d.lease;
  });
  await waitFor("the lease kept past two TTLs", async () => {
    const d = await admin.getGroup("ts.long");
    assert.equal(d.lease?.fence, first.fence, "the same lease");
    return Date.parse(d.lease.heartbeat_at) - Date.parse(first.leased_at) > 2000;
  });
  await w.stop();
  assert.ok(aborted, "index saw its signal abort");
  const d = await admin.getGroup("ts.long");
  assert.equal(d.lease, null, "released on stop");
  const r = (await admin.listRanges("ts.long")).ranges[0];
  assert.equal(r.status, "planned");
  assert.equal(r.next, 50, "planned again at its progress");
  assert.equal(r.attempts, 0, "a clean stop is no attempt: released with stopped");
  const win = await windowOf(admin, "ts.long");
  assert.equal(win.next, 50);
  assert.equal(win.ids.length, 49);
});

// startSignalWorker runs test/signal-worker.mjs, a worker process whose
// SIGINT and SIGTERM abort its run as examples/worker.mjs's do.
async function startSignalWorker(t, url, token) {
  const proc = spawn(process.execPath, [fileURLToPath(new URL("./signal-worker.mjs", import.meta.url))], {
    env: { ...process.env, LEASEHOLD_URL: url, LEASEHOLD_TOKEN: token },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let log = "";
  proc.stdout.on("data", (b) => (out += b));
  proc.stderr.on("data", (b) => (log += b));
  const exited = new Promise((r) => proc.on("exit", (code, signal) => r({ code, signal })));
  t.after(() => proc.exitCode === null && proc.signalCode === null && proc.kill("SIGKILL"));
  await waitFor("the worker process to start", () => {
    if (proc.exitCode !== null) throw new Error(`the worker exited: ${log}`);
    return out.includes("running");
  });
  return { proc, exited, log: () => log };
}

test("a worker process stopped mid-range by SIGTERM, then by SIGINT, hands its range back each time at its progress with no attempt used; a stop whose window cannot be uploaded uses one", async (t) => {
  // One range of 100000 ids, indexed 2 ms an id: in work at every stop.
  const { admin, client } = await setup(t, [], ["--lease-ttl", "1s"]);
  await admin.putGroup("ts.sig", { range_size: 100_000, start: 1 });
  await admin.planTail("ts.sig", 100_000);
  const range = async () => (await admin.listRanges("ts.sig")).ranges[0];
  let progress = 1;
  for (const sig of ["SIGTERM", "SIGINT"]) {
    const w = await startSignalWorker(t, admin.url, client.token);
    // In the range, past where the last stop left it: progress sent.
    await waitFor(`the worker in the range past ${progress}`, async () => {
      const r = await range();
      return r.status === "leased" && r.next > progress + 10;
    });
    w.proc.kill(sig);
    const { code, signal } = await w.exited;
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, `${sig}: the worker exits 0:\n${w.log()}`);
    assert.match(w.log(), /msg="released group" group="ts.sig" why="stopping"/, `${sig}: released as stopping`);
    const r = await range();
    assert.equal(r.status, "planned", `${sig}: planned again`);
    assert.ok(r.next > progress, `${sig}: the range moved on past ${progress}: next ${r.next}`);
    assert.equal(r.attempts, 0, `${sig}: a clean stop is no attempt: released with stopped`);
    assert.equal(r.last_error ?? null, null, `${sig}: no error`);
    assert.equal((await admin.getGroup("ts.sig")).lease, null, `${sig}: released`);
    const win = await windowOf(admin, "ts.sig");
    assert.equal(win.next, r.next, `${sig}: the window uploaded at the range's progress`);
    assert.equal(win.ids.length, r.next - 1, `${sig}: the window holds every id below its next, the last stop's window loaded`);
    progress = r.next;
  }

  // A stop whose window cannot be uploaded is no clean stop: released
  // plainly, the lease counts as an attempt.
  const w = runWorker(t, {
    client,
    newWindow: () =>
      new (class extends IdWindow {
        save() {
          throw new Error("the disk is full");
        }
      })(),
    index: slowIndex,
  });
  await waitFor(`the worker in the range past ${progress}`, async () => {
    const r = await range();
    return r.status === "leased" && r.next > progress + 10;
  });
  await w.stop();
  const r = await range();
  assert.equal((await admin.getGroup("ts.sig")).lease, null, "released");
  assert.deepEqual([r.status, r.attempts], ["planned", 1], "a stop with its window not saved counts its attempt");
  assert.equal((await windowOf(admin, "ts.sig")).next, progress, "the window stays the last one uploaded");
});
