// A fetch over Node's https module, for a node whose certificate a CA of
// its operator's own signed, or that asks for client certificates
// (--tls-client-ca): Node's fetch takes neither a CA nor a client
// certificate without another package.

import https from "node:https";
import { Readable } from "node:stream";

/** PEM text or bytes, one or several. */
export type PEM = string | Buffer | Array<string | Buffer>;

export interface TLSFiles {
  /** CAs trusted for the node's certificate, instead of Node's own list. */
  ca?: PEM;
  /** A client certificate and its key, for a node with --tls-client-ca. */
  cert?: PEM;
  key?: PEM;
}

/**
 * httpsFetch is a fetch that speaks https with tls; http:// URLs go to
 * Node's own fetch. Bodies may be text, bytes or streams, and answers
 * stream, as with fetch.
 */
export function httpsFetch(tls: TLSFiles): typeof fetch {
  const agent = new https.Agent({ keepAlive: true, ca: tls.ca, cert: tls.cert, key: tls.key });
  const f = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(input instanceof Request ? input.url : input);
    if (url.protocol !== "https:") return fetch(input, init);
    const method = (init.method ?? "GET").toUpperCase();
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    const body = init.body as unknown;
    if ((typeof body === "string" || body instanceof Uint8Array) && headers["content-length"] === undefined) {
      headers["content-length"] = String(Buffer.byteLength(body));
    }
    return new Promise<Response>((resolve, reject) => {
      const req = https.request(url, { method, headers, agent, signal: init.signal ?? undefined }, (res) => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          for (const x of Array.isArray(v) ? v : v === undefined ? [] : [v]) h.append(k, x);
        }
        const status = res.statusCode ?? 0;
        const noBody = method === "HEAD" || status === 204 || status === 304;
        if (noBody) res.resume();
        const stream = noBody ? null : (Readable.toWeb(res) as unknown as ReadableStream<Uint8Array>);
        resolve(new Response(stream, { status, statusText: res.statusMessage ?? "", headers: h }));
      });
      req.on("error", reject);
      if (body == null) {
        req.end();
      } else if (typeof body === "string" || body instanceof Uint8Array) {
        req.end(body);
      } else if (body instanceof ReadableStream) {
        Readable.fromWeb(body as import("node:stream/web").ReadableStream<Uint8Array>)
          .on("error", (e) => req.destroy(e))
          .pipe(req);
      } else if (typeof body === "object" && Symbol.asyncIterator in body) {
        Readable.from(body as AsyncIterable<Uint8Array>)
          .on("error", (e) => req.destroy(e))
          .pipe(req);
      } else {
        req.destroy();
        reject(new TypeError("httpsFetch: the body must be text, bytes or a stream"));
      }
    });
  };
  return f as typeof fetch;
}
