// @leasehold/client: the TypeScript client of a leasehold node's HTTP API
// (admin and worker endpoints, snapshots streamed with resume) and the
// worker pull loop, for Node 18.17 or later with its own fetch.

export * from "./errors.js";
export * from "./types.js";
export * from "./client.js";
export * from "./worker.js";
export * from "./https.js";
export { version } from "./version.js";
