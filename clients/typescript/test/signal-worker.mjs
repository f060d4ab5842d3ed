// A worker process for the stop tests (worker.test.mjs), wired to its
// signals as examples/worker.mjs is: SIGINT and SIGTERM abort run's
// signal. It indexes one id every few milliseconds into a window of the
// ids it holds, reporting progress as it goes, so a range of many ids is
// always in work when the signal comes. LEASEHOLD_URL and LEASEHOLD_TOKEN
// name the node and the worker node's token; it exits 0 once run
// resolves.
import { Client, Worker } from "../dist/index.js";
import { IdWindow, slowIndex } from "./window.mjs";

const stop = new AbortController();
process.once("SIGINT", () => stop.abort());
process.once("SIGTERM", () => stop.abort());

const worker = new Worker({
  client: new Client({ url: process.env.LEASEHOLD_URL, token: process.env.LEASEHOLD_TOKEN }),
  poll: { minMs: 20, maxMs: 200 },
  snapshotIntervalMs: -1, // the window goes up at the stop only
  newWindow: () => new IdWindow(),
  index: slowIndex,
});
// Tells the test the signal handlers are in place.
process.stdout.write("running\n");
await worker.run(stop.signal);
