// The client against a real node: every endpoint, the typed errors, and
// snapshots streamed both ways with a download resumed across a cut
// connection.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createWriteStream, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { gzipSync, gunzipSync } from "node:zlib";

import {
  Client, LeaseholdError, BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError, LeaseLostError,
  ConflictError, UnprocessableError, TooLargeError, UnavailableError, parseMetrics, metricValue,
} from "../dist/index.js";
import { startNode, waitFor } from "./node.mjs";

let node, admin;
before(async () => {
  node = await startNode();
  admin = new Client({ url: node.url, token: node.adminToken });
});
after(async () => node?.stop());

async function rejects(p, Class, code) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof Class, `${e?.name}: ${e?.message} is not a ${Class.name}`);
    assert.ok(e instanceof LeaseholdError);
    assert.equal(e.code, code);
    return true;
  });
}

async function collect(iter) {
  const parts = [];
  for await (const c of iter) parts.push(Buffer.from(c));
  return Buffer.concat(parts);
}

test("health, readiness and the description", async () => {
  const anon = new Client({ url: node.url });
  await anon.healthy();
  assert.equal(await anon.ready(), true);
  const doc = await anon.openapi();
  assert.equal(doc.openapi, "3.1.0");
  assert.ok(doc.paths["/api/v1/leases/{group}/next"]);
});

test("tokens that change", async () => {
  const reg = await admin.registerNode({ name: "ts-rotate" });
  const w = new Client({ url: node.url, token: reg.token });
  await rejects(w.rotateNodeToken(reg.id + 1000), ForbiddenError, "forbidden");
  await rejects(w.rotateAdminToken(), ForbiddenError, "forbidden");
  const fresh = await w.rotateNodeToken(reg.id);
  assert.match(fresh, /^lhn_\S{16,}/);
  assert.notEqual(fresh, reg.token);
  await rejects(w.lease(), UnauthorizedError, "unauthorized");
  assert.equal(await new Client({ url: node.url, token: fresh }).lease(), null);
  const byAdmin = await admin.rotateNodeToken(reg.id);
  await rejects(new Client({ url: node.url, token: fresh }).lease(), UnauthorizedError, "unauthorized");
  assert.equal(await new Client({ url: node.url, token: byAdmin }).lease(), null);
});

test("admin endpoints", async () => {
  const { group, created } = await admin.putGroup("ts.admin", { range_size: 100, start: 1 });
  assert.equal(created, true);
  assert.equal(group.name, "ts.admin");
  assert.equal(group.range_size, 100);
  assert.equal((await admin.putGroup("ts.admin", { priority: 2 })).created, false);
  assert.equal(await admin.planTail("ts.admin", 1000), 10);
  assert.equal(await admin.planHistory("ts.admin", 1), 0);
  const detail = await admin.getGroup("ts.admin");
  assert.equal(detail.priority, 2);
  assert.equal(detail.ranges.planned, 10);
  assert.equal(detail.lease, null);

  const page1 = await admin.listRanges("ts.admin", { status: "planned", limit: 4 });
  assert.equal(page1.ranges.length, 4);
  const page2 = await admin.listRanges("ts.admin", { status: "planned", limit: 4, after: page1.next });
  assert.equal(page2.ranges[0].start, page1.ranges[3].end + 1);
  assert.ok((await admin.listGroups({ limit: 10 })).groups.some((g) => g.name === "ts.admin"));

  const reg = await admin.registerNode({ name: "ts-admin-w", capacity: 2, priority_min: -10, priority_max: 10 });
  assert.match(reg.token, /\S{16,}/);
  assert.equal(reg.capacity, 2);
  const paused = await admin.pauseNode(reg.id, "alice");
  assert.equal(paused.paused, true);
  assert.equal(paused.paused_by, "alice");
  assert.equal((await admin.resumeNode(reg.id)).paused, false);
  const listed = (await admin.listNodes()).find((n) => n.id === reg.id);
  assert.equal(listed.name, "ts-admin-w");
  assert.equal(listed.token, undefined);
  await admin.deleteNode(reg.id);
  await rejects(admin.deleteNode(reg.id), NotFoundError, "not_found");

  const v = await admin.putRules({ lang: "en" });
  assert.deepEqual(await admin.getRules(), { version: v, body: { lang: "en" } });
  const f = await admin.findings();
  assert.ok(Array.isArray(f.stuck));
  assert.equal(typeof f.backlog.planned, "number");
  assert.equal((await admin.peers()).enabled, false);
});

test("typed errors carry the API's code", async () => {
  await rejects(new Client({ url: node.url }).listNodes(), UnauthorizedError, "unauthorized");
  await rejects(new Client({ url: node.url, token: "wrong" }).listNodes(), UnauthorizedError, "unauthorized");
  await rejects(admin.lease(), ForbiddenError, "forbidden");
  await rejects(admin.getGroup("ts.none"), NotFoundError, "not_found");
  await rejects(admin.getGroup("-bad"), BadRequestError, "bad_request");
  await admin.registerNode({ name: "ts-dup" });
  await rejects(admin.registerNode({ name: "ts-dup" }), ConflictError, "conflict");
  await admin.putGroup("ts.err", { range_size: 10 });
  await rejects(admin.planTail("ts.err", 1e12), UnprocessableError, "unprocessable");
  await rejects(admin.putRules({ big: "x".repeat(2 << 20) }), TooLargeError, "too_large");
  const gone = new Client({ url: "http://127.0.0.1:1", token: "x", retry: { minMs: 1, maxMs: 2, attempts: 2 } });
  await rejects(gone.healthy(), UnavailableError, "unavailable");
});

// ownNode gives a test a node of its own, so its worker leases only the
// groups the test plans.
async function ownNode(t) {
  const n = await startNode();
  t.after(() => n.stop());
  return new Client({ url: n.url, token: n.adminToken });
}

test("worker endpoints, failures and quarantine", async (t) => {
  const admin = await ownNode(t);
  await admin.putGroup("ts.work", { range_size: 100, start: 1 });
  await admin.planTail("ts.work", 500);
  const reg = await admin.registerNode({ name: "ts-work-w", capacity: 1 });
  const other = await admin.registerNode({ name: "ts-work-other" });
  const w = admin.withToken(reg.token);
  const o = admin.withToken(other.token);

  const g = await w.lease();
  assert.equal(g.group.name, "ts.work");
  assert.equal(g.snapshot, null);
  assert.ok(g.fence >= 1 && g.ttl_s > 0);
  assert.equal(await w.lease(), null, "at capacity: 204 is null");
  const gid = g.group.id;

  const r = await w.next(gid, g.fence);
  assert.deepEqual([r.start, r.end, r.next], [1, 100, 1]);
  assert.ok((await w.heartbeat(gid, g.fence)) > 0);
  assert.equal((await w.progress(r.id, g.fence, 50)).next, 50);
  await rejects(w.progress(r.id, g.fence, 10), UnprocessableError, "unprocessable");
  await rejects(o.progress(r.id, g.fence, 60), LeaseLostError, "lease_lost");
  await rejects(w.next(gid, g.fence + 1), LeaseLostError, "lease_lost");
  const done = await w.finish(r.id, g.fence, 100);
  assert.equal(done.status, "done");
  assert.equal(done.headers, 100);

  const r2 = await w.next(gid, g.fence);
  assert.equal(r2.start, 101);
  const failed = await w.failRange(r2.id, g.fence, "source said 500");
  assert.equal(failed.status, "planned");
  assert.equal(failed.last_error, "source said 500");
  const r3 = await w.next(gid, g.fence);
  const f3 = await w.failRange(r3.id, g.fence, "x".repeat(5000), false);
  assert.equal(f3.status, "failed");
  assert.equal(Buffer.byteLength(f3.last_error), 4096, "cut to fit");
  assert.equal((await admin.retryRange(r3.id)).status, "planned");

  await w.releaseUnreadable(gid, g.fence, "window did not load: bad magic");
  const q = await admin.getGroup("ts.work");
  assert.equal(q.lease, null);
  assert.equal(q.quarantine.error, "window did not load: bad magic");
  assert.equal(q.quarantine.node, "ts-work-w");
  assert.equal(await w.lease(), null, "a quarantined group is leased to nobody");
  assert.equal((await admin.liftQuarantine("ts.work")).quarantine, null);
  const g2 = await w.lease();
  assert.equal(g2.group.id, gid);
  assert.ok(g2.fence > g.fence);
  await rejects(w.release(gid, g.fence), LeaseLostError, "lease_lost");
  await rejects(admin.dropSnapshot("ts.work"), ConflictError, "conflict");
  await w.release(gid, g2.fence);
  assert.equal((await admin.dropSnapshot("ts.work")).quarantine, null);
});

test("a stopped release gives the range back the attempt its lease counted; a plain one keeps it", async (t) => {
  const admin = await ownNode(t);
  await admin.putGroup("ts.stop", { range_size: 100, start: 1 });
  await admin.planTail("ts.stop", 100);
  const reg = await admin.registerNode({ name: "ts-stop-w", capacity: 1 });
  const w = admin.withToken(reg.token);
  // Leases the group, works 10 ids of its range and gives it back with release.
  const cycle = async (release) => {
    const g = await w.lease();
    const r = await w.next(g.group.id, g.fence);
    assert.equal(r.start, 1);
    await w.progress(r.id, g.fence, r.next + 10);
    await release(g);
    assert.equal((await admin.getGroup("ts.stop")).lease, null);
    return (await admin.listRanges("ts.stop")).ranges[0];
  };
  for (const stop of [1, 2, 3]) {
    const r = await cycle((g) => w.release(g.group.id, g.fence, { stopped: true }));
    assert.deepEqual([r.status, r.attempts, r.next], ["planned", 0, 1 + 10 * stop], `stop ${stop}`);
  }
  // The signal alone, as before: a plain release, its attempt counted.
  const r = await cycle((g) => w.release(g.group.id, g.fence, AbortSignal.timeout(10000)));
  assert.deepEqual([r.status, r.attempts, r.next], ["planned", 1, 41]);
});

test("snapshots stream both ways, with digests", async (t) => {
  const admin = await ownNode(t);
  await admin.putGroup("ts.snap", { range_size: 100, start: 1 });
  await admin.planTail("ts.snap", 200);
  const reg = await admin.registerNode({ name: "ts-snap-w" });
  const w = admin.withToken(reg.token);
  const g = await w.lease();
  const gid = g.group.id;
  assert.equal(await w.getSnapshot(gid, g.fence), null, "no snapshot yet: null");

  // A streamed gzip body of 3 MiB, in chunks, with its digest.
  const raw = Buffer.alloc(3 << 20);
  for (let i = 0; i < raw.length; i++) raw[i] = (i * 7919) % 251;
  const gz = gzipSync(raw, { level: 1 });
  const sum = createHash("sha256").update(gz).digest();
  async function* chunks() {
    for (let i = 0; i < gz.length; i += 64 << 10) yield gz.subarray(i, i + (64 << 10));
  }
  const s = await w.putSnapshot(gid, g.fence, 101, chunks(), { gzip: true, digest: sum });
  assert.deepEqual([s.next, s.size, s.sha256], [101, gz.length, sum.toString("hex")]);

  const dl = await w.getSnapshot(gid, g.fence);
  assert.deepEqual([dl.next, dl.size, dl.sha256], [101, gz.length, sum.toString("hex")]);
  assert.ok(gunzipSync(await collect(dl)).equals(raw));

  const tail = await w.getSnapshot(gid, g.fence, { offset: gz.length - 1000 });
  assert.ok((await collect(tail)).equals(gz.subarray(gz.length - 1000)));

  // A wrong digest is refused and the old snapshot stays.
  await rejects(w.putSnapshot(gid, g.fence, 150, gzipSync("other"), { gzip: true, digest: sum }), UnprocessableError, "unprocessable");
  assert.equal((await admin.getGroup("ts.snap")).lease.snapshot.next, 101);

  // A plain body is compressed by the node.
  const plain = await w.putSnapshot(gid, g.fence, 120, "a plain window");
  assert.equal(plain.next, 120);
  assert.equal(gunzipSync(await collect(await w.getSnapshot(gid, g.fence))).toString(), "a plain window");

  // The operator's side: refused while held, then restored with force.
  await rejects(admin.putGroupSnapshot("ts.snap", 101, gz, { gzip: true }), ConflictError, "conflict");
  await w.release(gid, g.fence);
  const op = await admin.putGroupSnapshot("ts.snap", 101, () => chunks(), { gzip: true, force: true });
  assert.equal(op.sha256, sum.toString("hex"));
  const back = await admin.getGroupSnapshot("ts.snap");
  assert.ok((await collect(back.stream())).equals(gz));
});

// cutProxy forwards to the node, and cuts the first answer that carries
// more than `after` bytes after that many bytes, so a download breaks in
// the middle as on a bad network.
function cutProxy(target, after) {
  const { hostname, port } = new URL(target);
  let cuts = 0;
  const conns = new Set();
  const server = net.createServer((c) => {
    const up = net.connect(Number(port), hostname);
    conns.add(c).add(up);
    c.pipe(up);
    let seen = 0;
    up.on("data", (b) => {
      seen += b.length;
      if (cuts === 0 && seen > after) {
        cuts++;
        c.write(b.subarray(0, b.length - (seen - after)));
        c.destroy();
        up.destroy();
        return;
      }
      c.write(b);
    });
    up.on("end", () => c.end());
    up.on("error", () => c.destroy());
    c.on("error", () => up.destroy());
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({ url: `http://127.0.0.1:${server.address().port}`, cuts: () => cuts, close: () => {
        for (const c of conns) c.destroy();
        return new Promise((r) => server.close(r));
      } }),
    ),
  );
}

test("a download cut in the middle resumes with a Range request", async () => {
  await admin.putGroup("ts.cut", { range_size: 100, start: 1 });
  await admin.planTail("ts.cut", 100);
  const gz = gzipSync(Buffer.from(Array.from({ length: 200000 }, (_, i) => `id ${i}\n`).join("")), { level: 0 });
  await admin.putGroupSnapshot("ts.cut", 101, gz, { gzip: true });
  const proxy = await cutProxy(node.url, 300000);
  try {
    const via = new Client({ url: proxy.url, token: node.adminToken, retry: { minMs: 10, maxMs: 50, attempts: 5 } });
    const dl = await via.getGroupSnapshot("ts.cut");
    assert.equal(dl.size, gz.length);
    const got = await collect(dl);
    assert.equal(proxy.cuts(), 1, "the proxy cut the download");
    assert.equal(dl.resumes, 1, "and the client resumed it");
    assert.ok(got.equals(gz), "the resumed download is the snapshot, byte for byte");
  } finally {
    await proxy.close();
  }
});

test("metrics come as Prometheus text, without a token, and count what the node did", async (t) => {
  const admin = await ownNode(t);
  const anon = new Client({ url: admin.url });
  const before = parseMetrics(await anon.metrics());
  assert.equal(metricValue(before, "leasehold_build_info"), 1);
  assert.equal(metricValue(before, "leasehold_leases_granted_total"), 0);
  assert.equal(metricValue(before, "leasehold_range_failures_total", { outcome: "failed" }), 0);

  await admin.putGroup("ts.metrics", { range_size: 100, start: 1 });
  await admin.planTail("ts.metrics", 300);
  const w = admin.withToken((await admin.registerNode({ name: "ts-metrics-w" })).token);
  const g = await w.lease();
  const r = await w.next(g.group.id, g.fence);
  await w.finish(r.id, g.fence, 42);

  const text = await anon.metrics();
  assert.match(text, /^# HELP leasehold_leases_granted_total /m);
  const after = parseMetrics(text);
  assert.equal(metricValue(after, "leasehold_leases_granted_total"), 1);
  assert.equal(metricValue(after, "leasehold_ranges_finished_total"), 1);
  assert.equal(metricValue(after, "leasehold_headers_indexed_total"), 42);
  assert.equal(metricValue(after, "leasehold_http_requests_total", { method: "POST", route: "/api/v1/leases", status: "200" }), 1);
  // The catalog's gauges are read again at most every 2 s: poll them.
  await waitFor("the range gauges to count the finished range", async () => {
    const m = parseMetrics(await anon.metrics());
    return metricValue(m, "leasehold_ranges", { status: "done" }) === 1 && metricValue(m, "leasehold_ranges", { status: "leased" }) === 0 &&
      metricValue(m, "leasehold_ranges", { status: "planned" }) === 2;
  });
});

test("a backup streams as a tar of the catalog and its windows, manifest last, for the admin token only", async (t) => {
  const admin = await ownNode(t);
  await admin.putGroup("ts.backup", { range_size: 100, start: 1 });
  await admin.planTail("ts.backup", 300);
  const gz = gzipSync(Buffer.from(Array.from({ length: 100000 }, (_, i) => `id ${i}\n`).join("")), { level: 0 });
  await admin.putGroupSnapshot("ts.backup", 101, gz, { gzip: true });
  const reg = await admin.registerNode({ name: "ts-backup-w" });
  await rejects(admin.withToken(reg.token).backup(), ForbiddenError, "forbidden");
  await rejects(new Client({ url: admin.url }).backup(), UnauthorizedError, "unauthorized");

  const dir = mkdtempSync(join(tmpdir(), "leasehold-ts-backup-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const b = await admin.backup();
  assert.equal(b.files, 2, "the catalog and one window");
  assert.match(b.filename, /^leasehold-.+-\d+\.tar$/);
  await pipeline(Readable.fromWeb(b.stream()), createWriteStream(join(dir, "backup.tar")));
  assert.equal(b.position, statSync(join(dir, "backup.tar")).size);
  assert.ok(b.position > b.bytes, "the tar carries every file's bytes");

  const names = execFileSync("tar", ["-tf", "backup.tar"], { cwd: dir, encoding: "utf8" }).trim().split("\n");
  assert.equal(names.at(-1), "manifest.json", "the manifest comes last");
  execFileSync("tar", ["-xf", "backup.tar"], { cwd: dir });
  const m = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));
  assert.equal(m.files.length, b.files);
  assert.equal(m.files[0].path, "catalog.db");
  assert.equal(m.files.reduce((n, f) => n + f.size, 0), b.bytes);
  for (const f of m.files) {
    const got = readFileSync(join(dir, f.path));
    assert.equal(got.length, f.size, f.path);
    assert.equal(createHash("sha256").update(got).digest("hex"), f.sha256, f.path);
  }
  assert.ok(readFileSync(join(dir, m.files[1].path)).equals(gz), "the window is the one stored");

  // A backup closed early is stopped: the next one runs.
  const early = await admin.backup();
  await early.close();
  const again = await waitFor("a backup after one closed early", async () => {
    try {
      return await admin.backup();
    } catch (e) {
      if (e instanceof ConflictError) return null;
      throw e;
    }
  });
  let n = 0;
  for await (const c of again) n += c.length;
  assert.equal(again.files, 2);
  assert.ok(n > again.bytes, `the second backup streamed whole: ${n} tar bytes for ${again.bytes} bytes of files`);

  // A stream cut in the middle is an error, never a short backup.
  const proxy = await cutProxy(admin.url, 200000);
  try {
    const via = new Client({ url: proxy.url, token: admin.token });
    const cut = await via.backup();
    await rejects(collect(cut), UnprocessableError, "unprocessable");
    assert.equal(proxy.cuts(), 1);
  } finally {
    await proxy.close();
  }
});
