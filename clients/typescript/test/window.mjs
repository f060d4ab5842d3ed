// The window the worker tests index into, and an index call slow enough
// to be stopped in the middle of a range.

/** A window of the ids indexed, each once, saved as JSON {"ids": [...]}. */
export class IdWindow {
  ids = new Set();
  async load(input) {
    const parts = [];
    for await (const c of input) parts.push(Buffer.from(c));
    this.ids = new Set(JSON.parse(Buffer.concat(parts).toString()).ids);
  }
  save() {
    return JSON.stringify({ ids: [...this.ids] });
  }
}

/** Indexes one id every 2 ms into an IdWindow, reporting progress after each: a long range is in work whenever the worker stops. */
export async function slowIndex({ signal, range, window, progress }) {
  for (let id = range.next; id <= range.end; id++) {
    await new Promise((r) => setTimeout(r, 2));
    if (signal.aborted) throw signal.reason;
    window.ids.add(id);
    progress(id + 1, id + 1 - range.start);
  }
}
