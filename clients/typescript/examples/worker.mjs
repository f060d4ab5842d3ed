#!/usr/bin/env node
// An example worker in JavaScript: it leases groups from a leasehold node
// and "indexes" each range by counting its ids into a window that the
// node keeps as the group's snapshot, the same window as the Go example
// (examples/worker), so either can take over from the other. It prints
// what it indexed.
//
//   LEASEHOLD_URL=http://127.0.0.1:8080 LEASEHOLD_TOKEN=… node examples/worker.mjs --idle 3
//
// The token comes from the environment only: argument lists are public.
// LEASEHOLD_TOKEN is the name every leasehold worker reads; the older
// LEASEHOLD_NODE_TOKEN is still read, with a warning, and will go.
//
// It imports the package by its name, so the same file runs here (a
// package may import itself) and copied into a project that installed
// @leasehold/client.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { Client, Worker, version } from "@leasehold/client";

const { values: flags } = parseArgs({
  options: {
    url: { type: "string", default: process.env.LEASEHOLD_URL ?? "" },
    idle: { type: "string", default: "0" }, // seconds with no group held before stopping; 0: until a signal
    capacity: { type: "string", default: "2" },
  },
});
let token = process.env.LEASEHOLD_TOKEN ?? "";
if (!token && process.env.LEASEHOLD_NODE_TOKEN) {
  console.error("worker: LEASEHOLD_NODE_TOKEN is deprecated; set LEASEHOLD_TOKEN");
  token = process.env.LEASEHOLD_NODE_TOKEN;
}
if (!flags.url || !token) {
  console.error("worker: set LEASEHOLD_URL (or --url) and LEASEHOLD_TOKEN, the worker node's token");
  process.exit(2);
}

// The window: how many ids it has indexed, and the next id it has not. Ids
// below next are in it already, so a range that comes again after a
// takeover adds nothing twice.
class CountWindow {
  constructor(group) {
    this.w = { group, next: 0, ids: 0 };
  }
  async load(input) {
    let text = "";
    for await (const chunk of input) text += Buffer.from(chunk).toString();
    this.w = JSON.parse(text);
  }
  save() {
    return JSON.stringify(this.w) + "\n";
  }
}

const indexed = new Map(); // group → ids indexed by this run

const stop = new AbortController();
process.once("SIGINT", () => stop.abort());
process.once("SIGTERM", () => stop.abort());

const worker = new Worker({
  // A node serving HTTPS with its own CA's certificate: LEASEHOLD_CA_FILE.
  client: new Client({ url: flags.url, token, userAgent: `leasehold-example-worker-js (@leasehold/client ${version})`, ...(process.env.LEASEHOLD_CA_FILE ? { ca: readFileSync(process.env.LEASEHOLD_CA_FILE) } : {}) }),
  capacity: Number(flags.capacity),
  newWindow: (group) => new CountWindow(group.name),
  snapshotIntervalMs: -1, // windows go up when a group is caught up, and at the stop
  async index({ signal, grant, range, window, progress }) {
    const w = window.w;
    const from = Math.max(range.next, w.next);
    for (let id = from; id <= range.end; id++) {
      if (signal.aborted) throw signal.reason;
      w.ids++;
      w.next = id + 1;
      progress(id + 1, id + 1 - range.start); // headers: this range's ids so far
    }
    const added = Math.max(0, range.end + 1 - from);
    indexed.set(grant.group.name, (indexed.get(grant.group.name) ?? 0) + added);
    console.log(`indexed ${grant.group.name} ids ${range.next}..${range.end} (window holds ${w.ids} ids)`);
  },
});

// --idle: stop once no group has been held for that long.
const idleMs = Number(flags.idle) * 1000;
if (idleMs > 0) {
  let since = Date.now();
  const t = setInterval(() => {
    if (worker.held > 0) since = Date.now();
    else if (Date.now() - since >= idleMs) stop.abort();
  }, 100);
  stop.signal.addEventListener("abort", () => clearInterval(t));
}

try {
  await worker.run(stop.signal);
} catch (e) {
  console.error(`worker: ${e.message}`);
  process.exit(1);
}
let total = 0;
for (const [g, n] of [...indexed].sort()) {
  console.log(`worker: ${g}: ${n} ids indexed`);
  total += n;
}
console.log(`worker: stopped; ${total} ids indexed in ${indexed.size} groups`);
