// The client against a node serving HTTPS with a certificate of its own
// CA: refused without the CA, served with the `ca` option, and with a
// client certificate where the node asks for one (--tls-client-ca).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync, gunzipSync } from "node:zlib";

import { Client, UnavailableError } from "../dist/index.js";
import { startNode } from "./node.mjs";

const dir = mkdtempSync(join(tmpdir(), "leasehold-ts-pki-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function openssl(...args) {
  execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
}

/** ca makes a CA: its certificate file. */
function ca(name) {
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-keyout", `${name}.key`, "-out", `${name}.pem`, "-days", "2", "-subj", `/CN=${name}`);
  return join(dir, `${name}.pem`);
}

/** leaf makes a certificate for 127.0.0.1 signed by the CA named by: its cert and key files. */
function leaf(by, cn) {
  writeFileSync(join(dir, "ext.cnf"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
  openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-keyout", `${cn}.key`, "-out", `${cn}.csr`, "-subj", `/CN=${cn}`);
  openssl("x509", "-req", "-in", `${cn}.csr`, "-CA", `${by}.pem`, "-CAkey", `${by}.key`, "-CAcreateserial",
    "-out", `${cn}.pem`, "-days", "2", "-extfile", "ext.cnf");
  return [join(dir, `${cn}.pem`), join(dir, `${cn}.key`)];
}

const once = { minMs: 1, maxMs: 2, attempts: 1 };

test("https with the ca option; refused without it", async (t) => {
  const caFile = ca("ca");
  const [cert, key] = leaf("ca", "node");
  const node = await startNode(["--tls-cert", cert, "--tls-key", key]);
  t.after(() => node.stop());
  assert.match(node.url, /^https:/);

  const stranger = new Client({ url: node.url, token: node.adminToken, retry: once });
  await assert.rejects(stranger.healthy(), (e) => e instanceof UnavailableError && /certificate/.test(e.message));

  const admin = new Client({ url: node.url, token: node.adminToken, ca: readFileSync(caFile), retry: once });
  await admin.healthy();
  await admin.putGroup("ts.tls", { range_size: 100, start: 1 });

  // A snapshot streamed up and down over https.
  const gz = gzipSync(Buffer.alloc(1 << 20, 7));
  const sum = createHash("sha256").update(gz).digest();
  async function* chunks() {
    for (let i = 0; i < gz.length; i += 16 << 10) yield gz.subarray(i, i + (16 << 10));
  }
  const s = await admin.putGroupSnapshot("ts.tls", 1, chunks(), { gzip: true, digest: sum });
  assert.equal(s.sha256, sum.toString("hex"));
  const dl = await admin.getGroupSnapshot("ts.tls");
  const parts = [];
  for await (const c of dl) parts.push(Buffer.from(c));
  assert.equal(gunzipSync(Buffer.concat(parts)).length, 1 << 20);
  const { groups } = await admin.withToken(node.adminToken).listGroups();
  assert.ok(groups.some((g) => g.name === "ts.tls"));
});

test("a client certificate where the node asks for one", async (t) => {
  const caFile = ca("ca2");
  const clients = ca("clients");
  const [cert, key] = leaf("ca2", "node2");
  const [okCert, okKey] = leaf("clients", "operator");
  const node = await startNode(["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", clients]);
  t.after(() => node.stop());

  const anonymous = new Client({ url: node.url, token: node.adminToken, ca: readFileSync(caFile), retry: once });
  await assert.rejects(anonymous.healthy(), UnavailableError);
  const operator = new Client({
    url: node.url, token: node.adminToken, ca: readFileSync(caFile), cert: readFileSync(okCert), key: readFileSync(okKey), retry: once,
  });
  await operator.healthy();
});
