// The status item's state machine: every change it hears of shows, an error with its reason
// and a click that restarts.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RESTART_COMMAND, STATS_COMMAND, StatusModel, shortReason } from "../src/status";

describe("StatusModel", () => {
  it("goes starting -> loading -> ready -> the last latency, each shown", () => {
    const m = new StatusModel();
    assert.match(m.starting("/x/.venv/bin/llada-lsp").text, /sync~spin\) llada starting/);
    assert.match(m.onStatus({ state: "loading", message: "loading tiny-code" }).tooltip, /loading tiny-code/);
    assert.equal(m.onStatus({ state: "ready" }).text, "$(sparkle) llada ready");
    const a = m.onStats({ completionId: "1", uri: "u", firstMs: 41.6, totalMs: 120.2 });
    assert.equal(a.text, "$(sparkle) llada 42ms → 120ms");
    assert.equal(a.command, STATS_COMMAND);
    assert.equal(m.onStats({ completionId: "2", uri: "u", firstMs: 1506, totalMs: 1506 }).text, "$(sparkle) llada 1506ms");
  });

  it("keeps the last suggestion's latency after an answer that came out empty", () => {
    const m = new StatusModel();
    m.onStatus({ state: "ready" });
    assert.equal(m.onStats({ completionId: "1", uri: "u", firstMs: 35, totalMs: 35 }).text, "$(sparkle) llada 35ms");
    const empty = m.onStats({ completionId: "2", uri: "u", shown: false, emptyReason: "adds a parse error", firstMs: 61, totalMs: 61 });
    assert.equal(empty.text, "$(sparkle) llada 35ms");
    // the tooltip keeps the shown one's timings and says why the newest showed nothing
    assert.match(empty.tooltip, /completion 1 .*\n(.|\n)*last request \(completion 2\): nothing shown, adds a parse error/);
    const next = m.onStats({ completionId: "3", uri: "u", shown: true, firstMs: 48, totalMs: 48 });
    assert.equal(next.text, "$(sparkle) llada 48ms");
    assert.doesNotMatch(next.tooltip, /nothing shown/); // a shown answer clears it
    // an empty first answer still says the engine is up, with no latency yet, and why nothing showed
    const fresh = new StatusModel();
    fresh.starting("llada-lsp");
    const first = fresh.onStats({ completionId: "1", uri: "u", shown: false, firstMs: 20 });
    assert.equal(first.text, "$(sparkle) llada ready");
    assert.match(first.tooltip, /last request \(completion 1\): nothing shown, no suggestion/);
    // a restart forgets it
    assert.doesNotMatch(fresh.starting("llada-lsp").tooltip, /nothing shown/);
  });

  it("shows a ready engine that is warming, slow or stuck (llada/status pace)", () => {
    const m = new StatusModel();
    assert.equal(m.onStatus({ state: "ready", pace: "warming" }).text, "$(sync~spin) llada warming");
    assert.equal(m.onStatus({ state: "ready", pace: "slow: 3.1 s/step" }).text, "$(watch) llada slow: 3.1 s/step");
    const stuck = m.onStatus({ state: "ready", pace: "stuck: a request got no answer in 9 s" });
    assert.equal(stuck.text, "$(warning) llada stuck");
    assert.match(stuck.tooltip, /no answer in 9 s/);
    assert.equal(m.onStatus({ state: "ready", pace: "" }).text, "$(sparkle) llada ready");
  });

  it("shows a failed start with its reason, and a click restarts", () => {
    const m = new StatusModel();
    m.starting("llada-lsp");
    const v = m.failed("spawn /home/u/.venv/bin/llada-lsp ENOENT");
    assert.equal(v.text, "$(error) llada: spawn llada-lsp ENOENT");
    assert.match(v.tooltip, /spawn \/home\/u\/\.venv\/bin\/llada-lsp ENOENT/);
    assert.equal(v.command, RESTART_COMMAND);
    assert.ok(v.error);
    // a restart clears it
    const again = m.starting("llada-lsp");
    assert.equal(again.error, false);
    assert.equal(again.command, STATS_COMMAND);
  });

  it("shows the engine's error and a stopped server", () => {
    const m = new StatusModel();
    m.starting("llada-lsp");
    const e = m.onStatus({ state: "error", message: "daemon lost", engine: { backend: "sglang" } });
    assert.equal(e.text, "$(error) llada[sglang]: daemon lost");
    assert.equal(e.command, RESTART_COMMAND);
    const m2 = new StatusModel();
    m2.starting("llada-lsp");
    m2.onStatus({ state: "ready" });
    assert.equal(m2.stopped().text, "$(error) llada: the server stopped");
  });

  it("keeps long reasons short in the bar", () => {
    assert.equal(shortReason("spawn C:\\Users\\u\\llada-lsp.exe ENOENT"), "spawn llada-lsp.exe ENOENT");
    assert.equal(shortReason("x".repeat(80)).length, 60);
    assert.equal(shortReason("first line\nsecond"), "first line");
    assert.equal(shortReason("llada client: couldn't create connection to server.\nLaunching server using command /t/bin/llada-lsp failed. Error: spawn /t/bin/llada-lsp ENOENT"),
      "spawn llada-lsp ENOENT");
  });
});
