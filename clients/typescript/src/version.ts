// The package's version, sent in the client's User-Agent. It must equal
// package.json's "version" (test/client.test.mjs checks).
export const version = "0.1.0";
