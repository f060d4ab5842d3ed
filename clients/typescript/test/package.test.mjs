// The package as an outside project sees it: its ES module and CommonJS
// entry points export the same names, its version is package.json's, and
// a client names itself in User-Agent.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

import * as esm from "@leasehold/client";

const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));

test("the ES module and CommonJS entry points export the same names", () => {
  const cjs = createRequire(import.meta.url)("@leasehold/client");
  assert.deepEqual(Object.keys(cjs).filter((k) => k !== "__esModule").sort(), Object.keys(esm).sort());
  assert.equal(typeof cjs.Client, "function");
});

test("the version is package.json's and goes out in User-Agent", async () => {
  assert.equal(esm.version, pkg.version);
  const sent = [];
  const fetch = async (_url, init) => {
    sent.push(new Headers(init.headers).get("user-agent"));
    return new Response('{"status":"ok"}', { status: 200, headers: { "Content-Type": "application/json" } });
  };
  await new esm.Client({ url: "http://127.0.0.1:1", fetch }).healthy();
  await new esm.Client({ url: "http://127.0.0.1:1", fetch, userAgent: "mine/1" }).withToken("t").healthy();
  assert.equal(sent[0], `leasehold-client-ts/${pkg.version} node/${process.versions.node}`);
  assert.equal(sent[1], "mine/1");
});
