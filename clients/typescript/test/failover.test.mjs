// A worker given several nodes of a fleet: it leases at the first, moves
// to the next when the first cannot be reached, and comes back to the
// first once it answers again; a group is worked only at the node that
// granted it, so every window ends whole, each id once.
import { test } from "node:test";
import assert from "node:assert/strict";
import { gunzipSync } from "node:zlib";

import { Client, Worker, unreachable, UnavailableError } from "../dist/index.js";
import { startNode, waitFor } from "./node.mjs";
import { IdWindow } from "./window.mjs";

async function nodeWithGroup(t, name, high) {
  const node = await startNode(["--lease-ttl", "2s"]);
  t.after(() => node.stop());
  const admin = new Client({ url: node.url, token: node.adminToken });
  await admin.putGroup(name, { range_size: 100, start: 1 });
  await admin.planTail(name, high);
  const reg = await admin.registerNode({ name: "ts-worker", capacity: 1 });
  return { admin, token: reg.token, url: node.url };
}

async function windowIds(admin, name) {
  const dl = await admin.getGroupSnapshot(name);
  const parts = [];
  for await (const c of dl) parts.push(Buffer.from(c));
  return JSON.parse(gunzipSync(Buffer.concat(parts)).toString()).ids.length;
}

test("unreachable tells a node that cannot serve from one that refuses", () => {
  assert.equal(unreachable(new UnavailableError("unavailable", "node unreachable: fetch failed", 0)), true);
  assert.equal(unreachable(new UnavailableError("unavailable", "joining the fleet", 503)), true);
  assert.equal(unreachable(new Error("x")), false);
});

test("fails over to the next node and comes back to the first", async (t) => {
  const a = await nodeWithGroup(t, "ts.at-a", 3000);
  const b = await nodeWithGroup(t, "ts.at-b", 1000);
  let cut = false; // a's connections, cut like a dead node's
  const cutFetch = (url, init) => (cut ? Promise.reject(new TypeError("fetch failed: connection refused (cut by the test)")) : fetch(url, init));
  const retry = { minMs: 5, maxMs: 20, attempts: 3 };
  const lines = [];
  const logger = { info: (m) => lines.push(m), warn: (m) => lines.push(m), error: (m) => lines.push(m) };
  const stop = new AbortController();
  const worker = new Worker({
    client: new Client({ url: a.url, token: a.token, retry, fetch: cutFetch }),
    failover: [new Client({ url: b.url, token: b.token, retry })],
    reprobeMs: 300,
    logger,
    poll: { minMs: 20, maxMs: 200 },
    newWindow: () => new IdWindow(),
    async index({ range, window, progress, signal }) {
      for (let id = range.next; id <= range.end; id++) window.ids.add(id);
      progress(range.end + 1, 0);
      await new Promise((r) => setTimeout(r, 50)); // about 1.5 s for ts.at-a
      signal.throwIfAborted();
    },
  });
  const done = worker.run(stop.signal);
  t.after(() => stop.abort());
  const settled = async (x, name) => {
    const d = await x.admin.getGroup(name);
    return d.lease === null && d.ranges.planned + d.ranges.leased === 0;
  };
  await waitFor("the worker holding ts.at-a at the first node", async () => (await a.admin.getGroup("ts.at-a")).lease !== null);
  assert.equal((await b.admin.getGroup("ts.at-b")).lease, null, "nothing leased at the second node while the first had work");
  cut = true;
  await waitFor("ts.at-b done at the second node", () => settled(b, "ts.at-b"), 30000);
  assert.equal(await settled(a, "ts.at-a"), false, "ts.at-a done while its node was cut off");
  cut = false;
  await waitFor("ts.at-a done back at the first node", () => settled(a, "ts.at-a"), 30000);
  stop.abort();
  await done;
  assert.equal(await windowIds(a.admin, "ts.at-a"), 3000);
  assert.equal(await windowIds(b.admin, "ts.at-b"), 1000);
  assert.equal(lines.filter((l) => l.startsWith("node unreachable; leasing at the next")).length, 1, "the move said once");
  assert.ok(lines.includes("node reachable again; leasing there"), lines.join("\n"));
});

test("passes over a node that refuses the token and works at the next", async (t) => {
  const a = await nodeWithGroup(t, "ts.refused", 300);
  const b = await startNode([]);
  t.after(() => b.stop());
  const retry = { minMs: 5, maxMs: 20, attempts: 3 };
  const lines = [];
  const logger = { info: (m) => lines.push(m), warn: (m) => lines.push(m), error: (m) => lines.push(m) };
  const stop = new AbortController();
  const worker = new Worker({
    // b does not know a's token, as a node of a fleet that has not yet
    // folded the node it was registered at.
    client: new Client({ url: b.url, token: a.token, retry }),
    failover: [new Client({ url: a.url, token: a.token, retry })],
    reprobeMs: 300,
    logger,
    poll: { minMs: 20, maxMs: 200 },
    newWindow: () => new IdWindow(),
    async index({ range, window, progress }) {
      for (let id = range.next; id <= range.end; id++) window.ids.add(id);
      progress(range.end + 1, 0);
    },
  });
  const done = worker.run(stop.signal);
  t.after(() => stop.abort());
  await waitFor("ts.refused done at the second node", async () => {
    const d = await a.admin.getGroup("ts.refused");
    return d.lease === null && d.ranges.planned + d.ranges.leased === 0;
  }, 30000);
  assert.ok(lines.includes("node refuses the token; leasing at the next node of the fleet"), lines.join("\n"));
  stop.abort();
  await done;
});
