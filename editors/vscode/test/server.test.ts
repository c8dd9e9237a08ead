// The extension's protocol handling against the real llada-lsp over stdio (no mocks): the
// SuggestionTracker follows the server's llada/refine stream for the shown completion, and
// the settings reach the server as its options.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, describe, it } from "node:test";
import type { MessageConnection } from "vscode-jsonrpc/node";
import {
  DEFAULT_SETTINGS,
  applyEdits,
  completionIdOf,
  formatStats,
  insertTextOf,
  serverOptions,
  type LspInlineItem,
  type LspPosition,
  type RefineParams,
  type StatsParams,
  type StatusParams,
} from "../src/core";
import { ROOT, modelDir, startServer, stopServer, type RealServer } from "./realServer";
import { SuggestionTracker } from "../src/tracker";

const DATA = path.join(ROOT, "tests/llada_lsp/data"); // the language server tests' real files

async function poll<T>(what: string, timeoutMs: number, fn: () => T | undefined | false | Promise<T | undefined | false>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface InlineResult {
  items: LspInlineItem[];
}

const MODEL = modelDir();

describe("against the real llada-lsp", { skip: MODEL ? false : "no trained model available", timeout: 420_000 }, () => {
  let server: RealServer | undefined;
  let conn: MessageConnection;
  const tracker = new SuggestionTracker();
  const refines: RefineParams[] = [];
  const stats: StatsParams[] = [];
  const statuses: StatusParams[] = [];
  const configurationPulls: unknown[] = [];
  const settings = { ...DEFAULT_SETTINGS, maxTokens: { line: 32 } };
  let version = 1;
  let text = "";
  let uri = "";

  before(async () => {
    server = startServer(MODEL!, (c) => {
      c.onNotification("llada/refine", (p: RefineParams) => {
        refines.push(p);
        tracker.refine(p);
      });
      c.onNotification("llada/stats", (s: StatsParams) => {
        stats.push(s);
      });
      c.onNotification("llada/status", (s: StatusParams) => {
        statuses.push(s);
      });
      c.onNotification("window/showMessage", () => undefined);
      c.onNotification("$/progress", () => undefined);
      c.onRequest("window/workDoneProgress/create", () => null);
      c.onRequest("workspace/configuration", (p: { items: { section?: string }[] }) => {
        configurationPulls.push(p);
        return p.items.map((i) => (i.section === "llada" ? serverOptions(settings) : null));
      });
    });
    conn = server.conn;
    const init = await conn.sendRequest<{ capabilities: Record<string, unknown> }>("initialize", {
      processId: process.pid,
      rootUri: pathToFileURL(DATA).href,
      capabilities: {
        general: { positionEncodings: ["utf-16"] },
        window: { workDoneProgress: true },
        workspace: { configuration: true },
        textDocument: { inlineCompletion: {}, synchronization: { dynamicRegistration: false } },
      },
      initializationOptions: serverOptions(settings),
    });
    assert.ok(init.capabilities.inlineCompletionProvider, "the server offers inline completion");
    assert.equal(init.capabilities.positionEncoding ?? "utf-16", "utf-16");
    await conn.sendNotification("initialized", {});
    await poll("the model to load", 360_000, () => {
      const last = statuses.at(-1);
      if (last?.state === "error") {
        throw new Error(`engine failed: ${last.message}`);
      }
      return last?.state === "ready";
    });
    uri = pathToFileURL(path.join(DATA, "vscode_queue.ts")).href; // never written: an editor buffer
    text = fs.readFileSync(path.join(DATA, "queue.ts"), "utf8");
    await conn.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "typescript", version, text } });
  });

  after(() => stopServer(server));

  function positionAfter(needle: string): LspPosition {
    const i = text.indexOf(needle);
    assert.ok(i >= 0, needle);
    const end = i + needle.length;
    const line = text.slice(0, end).split("\n").length - 1;
    return { line, character: end - (text.lastIndexOf("\n", end - 1) + 1) };
  }

  async function type(at: LspPosition, s: string): Promise<void> {
    const lines = text.split("\n");
    lines[at.line] = lines[at.line].slice(0, at.character) + s + lines[at.line].slice(at.character);
    text = lines.join("\n");
    version += 1;
    await conn.sendNotification("textDocument/didChange", {
      textDocument: { uri, version },
      contentChanges: [{ range: { start: at, end: at }, text: s }],
    });
  }

  // triggerKind 2 (Automatic) as VS Code sends while typing; 1 (Invoked) when the user asks
  async function inline(at: LspPosition, triggerKind = 2): Promise<LspInlineItem[]> {
    const res = await conn.sendRequest<InlineResult | LspInlineItem[] | null>("textDocument/inlineCompletion", {
      textDocument: { uri },
      position: at,
      context: { triggerKind },
    });
    const items = Array.isArray(res) ? res : (res?.items ?? []);
    tracker.remember(uri, version, at, items);
    return items;
  }

  it("pulls the settings as server options", () => {
    assert.ok(configurationPulls.length >= 1);
  });

  it("tracks the refinements of the shown completion to the final text, and re-serves it", async (t) => {
    // Type like a user at a few places until the model suggests something.
    const places: [string, string][] = [
      ["const task = this.tasks.shift();\n", "    return "],
      ["size(): number {\n", "    return this."],
      ["this.emit(\"push\", task);\n", "    this."],
    ];
    let found: { at: LspPosition; items: LspInlineItem[] } | undefined;
    for (const [needle, typed] of places) {
      const start = positionAfter(needle);
      for (let n = 1; n <= typed.length && !found; n++) {
        const at = { line: start.line, character: n - 1 };
        if (n === 1) {
          await type({ line: start.line, character: 0 }, typed[0] + "\n");
        } else {
          await type(at, typed[n - 1]);
        }
        const pos = { line: start.line, character: n };
        const items = await inline(pos);
        if (items.length > 0 && insertTextOf(items[0])) {
          found = { at: pos, items };
        }
      }
      if (found) {
        break;
      }
    }
    assert.ok(found, "the model suggested nothing at any place");
    const shown = tracker.lookup(uri, version, found.at);
    assert.ok(shown, "the tracker holds the shown completion");
    const cid = shown.completionId;
    const first = insertTextOf(found.items[0]);
    assert.equal(found.items[0].command?.command, "llada.acceptCompletion");

    t.diagnostic(`suggestion ${JSON.stringify(first)} (completion ${cid})`);
    const final = await poll("the final refinement", 180_000, () => refines.find((r) => r.completionId === cid && r.final));
    const mine = refines.filter((r) => r.completionId === cid);
    assert.deepEqual(mine.map((r) => r.step), [...mine.map((r) => r.step)].sort((a, b) => a - b));
    assert.equal(mine.filter((r) => r.final).length, 1);
    let current = first;
    for (const r of mine) {
      assert.equal(r.uri, uri);
      current = applyEdits(current, r.edits);
      if (r.text !== undefined) {
        assert.equal(current, r.text, "the edits reproduce the text");
      }
    }
    assert.equal(tracker.get(uri)?.text, final.text ?? current);
    // A re-triggered request at the same state is answered from the tracker: the refined text.
    assert.equal(tracker.lookup(uri, version, found.at)?.text, final.text ?? current);

    const st = await poll("the stats", 10_000, () => stats.find((s) => s.completionId === cid));
    assert.match(formatStats(st), /^llada \d+ms/);
    for (const key of ["firstMs", "totalMs", "forwards", "tpf"] as const) {
      assert.equal(typeof st[key], "number", key);
    }

    // Typing the suggestion's first character: the server serves the rest (type-through).
    const shownText = tracker.get(uri)!.text;
    if (shownText.length > 1 && !shownText.startsWith("\n")) {
      await type(found.at, shownText[0]);
      const next = { line: found.at.line, character: found.at.character + 1 };
      assert.equal(tracker.lookup(uri, version, found.at), undefined, "a new version is not served from the tracker");
      const items = await inline(next);
      assert.equal(items.length, 1);
      assert.equal(insertTextOf(items[0]), shownText.slice(1));
      const st2 = await poll("the type-through stats", 10_000, () => stats.find((s) => s.completionId === tracker.get(uri)?.completionId));
      assert.equal(st2.cacheHit, true);
      t.diagnostic("type-through checked");
    }
  });

  it("answers an invoked request with every candidate that fits, for cycling", async (t) => {
    // Each indented line in turn has its code blanked out, the cursor after its indentation.
    const lines = text.split("\n");
    const spots = lines.map((l, k) => [l, k] as const).filter(([l]) => l.trim() && l !== l.trimStart()).slice(2, 10);
    let several: LspInlineItem[] | undefined;
    for (const [line, k] of spots) {
      const ind = line.length - line.trimStart().length;
      const doc = pathToFileURL(path.join(DATA, `vscode_cycle${k}.ts`)).href;
      const body = [...lines.slice(0, k), line.slice(0, ind), ...lines.slice(k + 1)].join("\n");
      await conn.sendNotification("textDocument/didOpen", { textDocument: { uri: doc, languageId: "typescript", version: 1, text: body } });
      const ask = async (triggerKind: number): Promise<LspInlineItem[]> => {
        const res = await conn.sendRequest<InlineResult | LspInlineItem[] | null>("textDocument/inlineCompletion", {
          textDocument: { uri: doc }, position: { line: k, character: ind }, context: { triggerKind },
        });
        return Array.isArray(res) ? res : (res?.items ?? []);
      };
      const items = await ask(1);
      const texts = items.map(insertTextOf);
      assert.equal(new Set(texts).size, texts.length, "distinct candidates");
      assert.deepEqual(items.map((it) => it.command?.arguments?.[1]), texts.map((_, i) => i), "each item names its index");
      if (texts.length > 1) {
        // an automatic request at the same place gets them from the server's cache
        assert.deepEqual((await ask(2)).map(insertTextOf), texts);
        const tracked = new SuggestionTracker().remember(doc, 1, { line: k, character: ind }, items);
        assert.deepEqual(tracked?.others, texts.slice(1));
        several = items;
        break;
      }
    }
    assert.ok(several, "no place got more than one candidate");
    t.diagnostic(`candidates ${JSON.stringify(several.map(insertTextOf))}`);
  });

  it("extends the completion widget's selected item, over its range, refinements included", async (t) => {
    // VS Code asks while its suggest widget is open with `selectedCompletionInfo`: what the
    // server answers must start with the item's text and replace the item's range.
    const lines = text.split("\n");
    let checked: string | undefined;
    for (const [k, line] of lines.entries()) {
      const ind = line.length - line.trimStart().length;
      const word = /^[A-Za-z_]\w{3,}/.exec(line.trimStart())?.[0];
      if (!ind || !word) {
        continue;
      }
      const doc = pathToFileURL(path.join(DATA, `vscode_selected${k}.ts`)).href;
      const body = [...lines.slice(0, k), line.slice(0, ind + 2), ...lines.slice(k + 1)].join("\n");
      await conn.sendNotification("textDocument/didOpen", { textDocument: { uri: doc, languageId: "typescript", version: 1, text: body } });
      const range = { start: { line: k, character: ind }, end: { line: k, character: ind + 2 } };
      const at = { line: k, character: ind + 2 };
      const res = await conn.sendRequest<InlineResult | LspInlineItem[] | null>("textDocument/inlineCompletion", {
        textDocument: { uri: doc }, position: at, context: { triggerKind: 2, selectedCompletionInfo: { range, text: word } },
      });
      const items = Array.isArray(res) ? res : (res?.items ?? []);
      if (items.length === 0) {
        continue;
      }
      for (const it of items) {
        assert.ok(insertTextOf(it).startsWith(word), `${JSON.stringify(insertTextOf(it))} extends ${word}`);
        assert.deepEqual(it.range, range);
      }
      const mine = new SuggestionTracker();
      mine.remember(doc, 1, at, items, word);
      const cid = completionIdOf(items[0])!;
      const final = await poll("the final refinement", 180_000, () => refines.find((r) => r.completionId === cid && r.final));
      for (const r of refines.filter((r) => r.completionId === cid)) {
        mine.refine(r);
      }
      const shown = mine.lookup(doc, 1, at, word);
      assert.equal(shown?.text, final.text);
      assert.ok(shown?.text.startsWith(word));
      assert.deepEqual(shown?.range, range);
      checked = shown?.text;
      break;
    }
    assert.ok(checked, "the model suggested nothing after any selected word");
    t.diagnostic(`suggestion ${JSON.stringify(checked)}`);
  });

  it("answers a position past the end with an error, and keeps serving", async () => {
    await assert.rejects(conn.sendRequest("textDocument/inlineCompletion", {
      textDocument: { uri }, position: { line: 9999, character: 0 }, context: { triggerKind: 1 },
    }));
    const info = await conn.sendRequest<{ options: { mode: string; max_tokens: { line: number } } }>("llada/debugInfo", {});
    assert.equal(info.options.mode, "speedy");
    assert.equal(info.options.max_tokens.line, 32, "maxTokens reached the server");
  });
});
