// Starts a real `leasehold serve` for the tests: the binary from
// LEASEHOLD_BIN (scripts/test.sh builds it) or built here with go build,
// on a free loopback port, with a temporary data directory; the admin
// token is read from <data>/admin.token.
//
// With LEASEHOLD_API_RECORD set to a directory (scripts/test.sh sets it),
// each node is reached through a recording proxy that writes every
// request and its answer there, one line each in the form of Go's
// nodetest.Exchange; `go run ./internal/nodetest/apicheck DIR` then checks
// every answer against web/openapi.json, as the Go tests' answers are.
import { execFileSync, spawn } from "node:child_process";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
let built = "";

export function leaseholdBinary() {
  if (process.env.LEASEHOLD_BIN) return process.env.LEASEHOLD_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "leasehold-bin-"));
    built = join(dir, "leasehold");
    execFileSync("go", ["build", "-o", built, "./cmd/leasehold"], { cwd: root, stdio: "inherit" });
  }
  return built;
}

/** waitFor polls cond every 20 ms until it returns a truthy value or ms pass. */
export async function waitFor(what, cond, ms = 15000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ""}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** startNode starts a node; stop() ends it and removes its data. */
export async function startNode(args = []) {
  const data = mkdtempSync(join(tmpdir(), "leasehold-ts-"));
  const proc = spawn(leaseholdBinary(), ["serve", "--data", data, "--listen", "127.0.0.1:0", "--nats", "off", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  proc.stdout.on("data", (b) => (log += b));
  proc.stderr.on("data", (b) => (log += b));
  const exited = new Promise((r) => proc.on("exit", r));
  const url = await waitFor("the node to serve", () => {
    if (proc.exitCode !== null) throw new Error(`leasehold serve exited: ${log}`);
    const m = /msg="leasehold serving".* url=(https?:\/\/\S+)/.exec(log);
    return m && existsSync(join(data, "admin.token")) ? m[1] : null;
  });
  const adminToken = readFileSync(join(data, "admin.token"), "utf8").trim();
  // The recording proxy speaks plain http to the node.
  const proxy = process.env.LEASEHOLD_API_RECORD && url.startsWith("http:") ? await recordingProxy(url, process.env.LEASEHOLD_API_RECORD) : null;
  return {
    url: proxy ? proxy.url : url,
    adminToken,
    data,
    log: () => log,
    async stop() {
      await proxy?.close();
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        await exited;
      }
      rmSync(data, { recursive: true, force: true });
    },
  };
}

const maxRecordedBody = 1 << 20;
let recordSeq = 0;

/** capture keeps the first maxRecordedBody bytes of a body. */
function capture() {
  const parts = [];
  let n = 0;
  return {
    cut: false,
    keep(b) {
      const room = maxRecordedBody - n;
      if (b.length > room) this.cut = true;
      if (room > 0) {
        parts.push(b.subarray(0, room));
        n += Math.min(b.length, room);
      }
    },
    bytes: () => Buffer.concat(parts),
  };
}

/** headerMap turns Node's raw headers into Go's http.Header form (name → values). */
function headerMap(raw) {
  const h = {};
  for (let i = 0; i < raw.length; i += 2) (h[raw[i]] ??= []).push(raw[i + 1]);
  return h;
}

/**
 * recordingProxy forwards every request to target, streaming both ways,
 * and appends each exchange answered to the end to a file of its own in
 * dir, as the Go recorder does: bodies kept up to 1 MiB, snapshot bodies
 * (not JSON) not kept. An exchange cut off is not written, and its cut is
 * passed on to the other side.
 */
async function recordingProxy(target, dir) {
  const file = join(dir, `ts-${process.pid}-${++recordSeq}.jsonl`);
  const { hostname, port } = new URL(target);
  const agent = new http.Agent({ keepAlive: true });
  const server = http.createServer((req, res) => {
    const reqBody = capture();
    const headers = { ...req.headers };
    delete headers.connection;
    const up = http.request({ host: hostname, port, method: req.method, path: req.url, headers, agent }, (ans) => {
      const resBody = capture();
      const kept = [];
      for (let i = 0; i < ans.rawHeaders.length; i += 2) {
        if (!/^(connection|keep-alive)$/i.test(ans.rawHeaders[i])) kept.push(ans.rawHeaders[i], ans.rawHeaders[i + 1]);
      }
      res.writeHead(ans.statusCode, kept);
      ans.on("data", (b) => resBody.keep(b));
      ans.pipe(res);
      ans.on("end", () => {
        const reqType = req.headers["content-type"] ?? "";
        const resType = ans.headers["content-type"] ?? "";
        const keepReq = reqType === "" || reqType === "application/json";
        const x = {
          method: req.method,
          url: req.url,
          request_header: headerMap(req.rawHeaders),
          request_body: keepReq ? reqBody.bytes().toString("base64") : null,
          request_cut: !keepReq || reqBody.cut || !req.complete,
          status: ans.statusCode,
          response_header: headerMap(kept),
          response_body: resType === "application/gzip" ? null : resBody.bytes().toString("base64"),
          response_cut: resType === "application/gzip" || resBody.cut,
        };
        appendFileSync(file, JSON.stringify(x) + "\n");
      });
      ans.on("close", () => {
        if (!ans.complete) res.destroy(); // the node cut its answer off: cut ours
      });
    });
    up.on("error", () => res.destroy());
    req.on("data", (b) => reqBody.keep(b));
    req.pipe(up);
    res.on("close", () => {
      if (!res.writableFinished) up.destroy();
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () =>
      new Promise((r) => {
        server.close(r);
        server.closeAllConnections();
        agent.destroy();
      }),
  };
}
