// Starts a real `leasehold serve` for the tests: the binary from
// LEASEHOLD_BIN (scripts/test.sh builds it) or built here with go build,
// on a free loopback port, with a temporary data directory; the admin
// token is read from <data>/admin.token.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
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
    const m = /msg="leasehold serving".* url=(http:\/\/\S+)/.exec(log);
    return m && existsSync(join(data, "admin.token")) ? m[1] : null;
  });
  const adminToken = readFileSync(join(data, "admin.token"), "utf8").trim();
  return {
    url,
    adminToken,
    data,
    log: () => log,
    async stop() {
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        await exited;
      }
      rmSync(data, { recursive: true, force: true });
    },
  };
}
