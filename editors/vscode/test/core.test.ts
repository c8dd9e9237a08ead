// Unit tests of the pure protocol logic (no server).
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, it } from "node:test";
import {
  DEFAULT_SETTINGS,
  applyEdits,
  MACHINE_SETTINGS,
  formatStats,
  machineValue,
  parseSettingsJson,
  resolveServerCommand,
  serverOptions,
  statusName,
  type LspInlineItem,
  type LspTextEdit,
  withUserFile,
} from "../src/core";
import { PASS_THROUGH, RESTART_SETTINGS, mergeOptions, passThroughOptions, type InspectedValue } from "../src/settings";
import { FINAL_HOLD_MS, RefineHold, SuggestionTracker, answerFromTracker, type Timers } from "../src/tracker";

const edit = (l1: number, c1: number, l2: number, c2: number, newText: string): LspTextEdit => ({
  range: { start: { line: l1, character: c1 }, end: { line: l2, character: c2 } },
  newText,
});

describe("applyEdits", () => {
  it("applies edits given against the original text", () => {
    assert.equal(applyEdits("hello world", [edit(0, 6, 0, 11, "there")]), "hello there");
    assert.equal(applyEdits("ab\ncd", [edit(0, 0, 0, 1, "X"), edit(1, 1, 1, 2, "Y")]), "Xb\ncY");
    assert.equal(applyEdits("a\nb", [edit(0, 1, 1, 0, "")]), "ab");
    assert.equal(applyEdits("x", []), "x");
  });
  it("counts characters in UTF-16 units", () => {
    assert.equal(applyEdits("😀 = 1", [edit(0, 2, 0, 2, "x")]), "😀x = 1");
  });
});

describe("SuggestionTracker", () => {
  const item = (id: string, text: string): LspInlineItem => ({ insertText: text, command: { title: "Accept", command: "llada.acceptCompletion", arguments: [id] } });

  it("keeps refinements that overtake their answer and applies them when it comes", () => {
    const t = new SuggestionTracker();
    t.remember("file:///a.py", 3, { line: 1, character: 4 }, [item("6", "old")]);
    assert.equal(t.refine({ completionId: "7", uri: "file:///a.py", version: 3, edits: [edit(0, 0, 0, 3, "bar")], step: 1, final: false }), undefined);
    assert.equal(t.refine({ completionId: "7", uri: "file:///a.py", version: 3, edits: [edit(0, 3, 0, 3, "(2)")], step: 2, final: false }), undefined);
    const s = t.remember("file:///a.py", 3, { line: 1, character: 4 }, [item("7", "foo")]);
    assert.equal(s?.text, "bar(2)");
    assert.equal(s?.step, 2);
    // applied once: a later answer for the same id starts from its own text
    assert.equal(t.remember("file:///a.py", 3, { line: 1, character: 4 }, [item("7", "foo")])?.text, "foo");
  });

  it("applies refinements of the shown completion only, in step order", () => {
    const t = new SuggestionTracker();
    t.remember("file:///a.py", 3, { line: 1, character: 4 }, [item("7", "foo(1)")]);
    assert.equal(t.refine({ completionId: "8", uri: "file:///a.py", version: 3, edits: [edit(0, 0, 0, 3, "bar")], step: 1, final: false }), undefined);
    const s = t.refine({ completionId: "7", uri: "file:///a.py", version: 3, edits: [edit(0, 4, 0, 5, "2")], text: "foo(2)", step: 2, final: false });
    assert.equal(s?.text, "foo(2)");
    assert.equal(t.refine({ completionId: "7", uri: "file:///a.py", version: 3, edits: [], step: 1, final: false }), undefined);
    const fin = t.refine({ completionId: "7", uri: "file:///a.py", version: 3, edits: [], text: "foo(2)", step: 3, final: true });
    assert.equal(fin, undefined, "an unchanged final text needs no re-trigger");
    assert.equal(t.get("file:///a.py")?.final, true);
  });

  it("serves a re-triggered request at the same document state only", () => {
    const t = new SuggestionTracker();
    t.remember("file:///a.py", 3, { line: 1, character: 4 }, [item("7", "foo")]);
    assert.equal(t.lookup("file:///a.py", 3, { line: 1, character: 4 })?.text, "foo");
    assert.equal(t.lookup("file:///a.py", 4, { line: 1, character: 4 }), undefined);
    assert.equal(t.lookup("file:///a.py", 3, { line: 1, character: 5 }), undefined);
    t.remember("file:///a.py", 4, { line: 1, character: 5 }, []);
    assert.equal(t.get("file:///a.py"), undefined);
  });

  it("tracks a suggestion made for a selected completion widget item with its range, for that item only", () => {
    const t = new SuggestionTracker();
    const range = { start: { line: 2, character: 4 }, end: { line: 2, character: 6 } };
    t.remember("file:///a.py", 5, { line: 2, character: 6 }, [{ ...item("9", "return x"), range }], "return");
    assert.equal(t.lookup("file:///a.py", 5, { line: 2, character: 6 }), undefined, "not without the widget item");
    assert.equal(t.lookup("file:///a.py", 5, { line: 2, character: 6 }, "repr"), undefined, "not for another item");
    const s = t.lookup("file:///a.py", 5, { line: 2, character: 6 }, "return");
    assert.deepEqual(s?.range, range);
    // refinements carry the item's text in front, like the items
    const r = t.refine({ completionId: "9", uri: "file:///a.py", version: 5, edits: [edit(0, 7, 0, 8, "y")], text: "return y", step: 1, final: false });
    assert.equal(r?.text, "return y");
    t.remember("file:///a.py", 5, { line: 2, character: 6 }, [item("10", "x")]);
    assert.equal(t.lookup("file:///a.py", 5, { line: 2, character: 6 })?.text, "x");
    assert.equal(t.lookup("file:///a.py", 5, { line: 2, character: 6 }, "return"), undefined);
  });

  it("keeps the other candidates for cycling, and asks the server when the user invokes without them", () => {
    const t = new SuggestionTracker();
    const one = t.remember("u", 1, { line: 0, character: 0 }, [item("1", "a")]);
    assert.deepEqual(one?.others, []);
    assert.equal(answerFromTracker(one, false, false), true, "automatic: the tracked text");
    assert.equal(answerFromTracker(one, true, true), true, "the extension's own re-trigger");
    assert.equal(answerFromTracker(one, true, false), false, "the user invoked: fetch the candidates");
    assert.equal(answerFromTracker(undefined, false, true), false);
    const many = t.remember("u", 2, { line: 0, character: 0 }, [item("2", "a"), item("2", "b"), item("2", "c")]);
    assert.deepEqual(many?.others, ["b", "c"]);
    assert.equal(answerFromTracker(many, true, false), true, "the candidates are known");
  });

  it("replaces in place only while VS Code shows an automatic request's answer at the shown state", () => {
    const t = new SuggestionTracker();
    const at = { line: 3, character: 4 };
    t.remember("u", 1, at, [item("1", "a")]);
    assert.equal(t.replacesInPlace("u"), false, "no answer noted");
    t.noteAnswer("u", 1, at, false);
    assert.equal(t.replacesInPlace("u"), true, "automatic: an explicit trigger asks again");
    t.noteAnswer("u", 1, at, true);
    assert.equal(t.replacesInPlace("u"), false, "explicit: VS Code answers the trigger itself");
    t.noteAnswer("u", 1, { line: 3, character: 5 }, false);
    assert.equal(t.replacesInPlace("u"), false, "another position");
    t.noteAnswer("u", 2, at, false);
    assert.equal(t.replacesInPlace("u"), false, "another version");
    t.noteAnswer("u", 1, at, false);
    t.forget("u");
    assert.equal(t.replacesInPlace("u"), false, "forgotten");
  });

  it("prefers the full text when the edits do not reproduce it", () => {
    const t = new SuggestionTracker();
    t.remember("u", 1, { line: 0, character: 0 }, [item("1", "abc")]);
    assert.equal(t.refine({ completionId: "1", uri: "u", version: 1, edits: [edit(0, 0, 0, 1, "z")], text: "xyz", step: 1, final: true })?.text, "xyz");
  });
});

describe("RefineHold", () => {
  const item = (id: string, text: string): LspInlineItem => ({ insertText: text, command: { title: "Accept", command: "llada.acceptCompletion", arguments: [id] } });
  /** Timers run by hand: `fire()` runs the pending ones as if their time had come. */
  const manual = (): Timers & { pending: Map<number, () => void>; fire(): void; delays: number[] } => {
    let n = 0;
    const pending = new Map<number, () => void>();
    const delays: number[] = [];
    return {
      pending, delays,
      set: (fn, ms) => { pending.set(++n, fn); delays.push(ms); return n; },
      clear: (h) => { pending.delete(h as number); },
      fire: () => { const fns = [...pending.values()]; pending.clear(); fns.forEach((f) => f()); },
    };
  };
  interface Setup {
    t: SuggestionTracker;
    timers: ReturnType<typeof manual>;
    shown: string[];
    hold: RefineHold;
    refine: (text: string, step: number, final: boolean) => void;
    at: { line: number; character: number };
  }
  const setup = (): Setup => {
    const t = new SuggestionTracker();
    const timers = manual();
    const shown: string[] = [];
    const hold = new RefineHold((uri, id) => shown.push(`${uri} ${id} ${t.get(uri)?.text}`), FINAL_HOLD_MS, timers);
    const at = { line: 0, character: 4 };
    t.remember("u", 1, at, [item("1", "draft")]);
    t.noteAnswer("u", 1, at, false);
    const refine = (text: string, step: number, final: boolean): void => {
      const changed = t.refine({ completionId: "1", uri: "u", version: 1, edits: [], text, step, final }) !== undefined;
      hold.refined(t.get("u")!, changed, t.replacesInPlace("u"));
    };
    return { t, timers, shown, hold, refine, at };
  };

  it("holds the refinements while the in-place replacement is left, and shows the final text once", () => {
    const { timers, shown, hold, refine } = setup();
    refine("one", 1, false);
    refine("two", 2, false);
    assert.deepEqual(shown, [], "held for the final text");
    assert.equal(hold.holding("u"), true);
    assert.equal(timers.pending.size, 1, "one timer for the held run");
    refine("two", 3, true); // the final refinement, text unchanged
    assert.deepEqual(shown, ["u 1 two"], "the final text at once");
    assert.equal(timers.pending.size, 0, "the timer stopped");
    timers.fire();
    assert.deepEqual(shown, ["u 1 two"]);
  });

  it("shows the newest text when no final comes within the hold, and later ones at once", () => {
    const { t, timers, shown, refine, at } = setup();
    refine("one", 1, false);
    assert.deepEqual(timers.delays, [FINAL_HOLD_MS]);
    timers.fire();
    assert.deepEqual(shown, ["u 1 one"], "the newest text when the hold ends");
    t.noteAnswer("u", 1, at, true); // VS Code took the re-trigger's (explicit) answer
    refine("two", 2, false);
    assert.deepEqual(shown, ["u 1 one", "u 1 two"], "no in-place replacement left: at once");
    refine("two", 3, true);
    assert.deepEqual(shown, ["u 1 one", "u 1 two"], "an unchanged final text: nothing to show");
  });

  it("shows a final text that changed at once, and holds nothing that did not change", () => {
    const { shown, hold, refine } = setup();
    refine("draft", 1, false);
    assert.equal(hold.holding("u"), false, "no change: nothing held");
    refine("done", 2, true);
    assert.deepEqual(shown, ["u 1 done"]);
  });

  it("drops a held refinement when the document is forgotten or another suggestion is refined", () => {
    const { t, timers, shown, hold, refine, at } = setup();
    refine("one", 1, false);
    hold.forget("u");
    assert.equal(timers.pending.size, 0);
    refine("two", 2, false);
    t.remember("u", 1, at, [item("2", "other")]);
    hold.refined(t.get("u")!, t.refine({ completionId: "2", uri: "u", version: 1, edits: [], text: "other!", step: 1, final: false }) !== undefined, true);
    assert.equal(timers.pending.size, 1, "the older suggestion's timer replaced");
    timers.fire();
    assert.deepEqual(shown, ["u 2 other!"]);
  });
});

describe("settings", () => {
  it("maps the extension settings to the server options", () => {
    assert.deepEqual(serverOptions(DEFAULT_SETTINGS), { mode: "speedy", engine: "inprocess", languages: ["*"], debounceMs: 0 });
    assert.deepEqual(
      serverOptions({ ...DEFAULT_SETTINGS, mode: "quality", enabledLanguages: ["python"], maxTokens: { line: 20, block: 0 }, model: "/m" }),
      { mode: "quality", engine: "inprocess", languages: ["python"], debounceMs: 0, maxTokens: { line: 20 }, model: "/m" },
    );
    assert.deepEqual(serverOptions({ ...DEFAULT_SETTINGS, alternatives: 12 }).alternatives, 8);
    assert.equal("alternatives" in serverOptions({ ...DEFAULT_SETTINGS, alternatives: 0 }), false);
    assert.equal("invokedAlternatives" in serverOptions(DEFAULT_SETTINGS), false);
    assert.equal(serverOptions({ ...DEFAULT_SETTINGS, invokedAlternatives: 2 }).invokedAlternatives, 2);
    assert.equal(serverOptions({ ...DEFAULT_SETTINGS, invokedAlternatives: 12 }).invokedAlternatives, 8);
    assert.equal(serverOptions({ ...DEFAULT_SETTINGS, invokedAlternatives: 0 }).invokedAlternatives, 0);
  });

  it("finds the server: setting, $LLADA_LSP, PATH, the checkout's .venv, interpreter, workspace .venv", () => {
    const base = { pythonPath: "/env/bin/python", workspaceFolders: ["/ws"], platform: "linux", trusted: true, join: (...p: string[]) => path.posix.join(...p), dirname: (p: string) => path.posix.dirname(p) };
    const has = (...paths: string[]) => (p: string) => paths.includes(p);
    const all = has("/usr/bin/llada-lsp", "/src/llada/.venv/bin/llada-lsp", "/env/bin/llada-lsp", "/ws/.venv/bin/llada-lsp");
    const full = { ...base, serverPath: "", envPath: "/e/llada-lsp", pathDirs: ["/bin", "/usr/bin"], checkout: "/src/llada" };
    assert.equal(resolveServerCommand({ ...full, serverPath: "/x/llada-lsp", exists: all }).command, "/x/llada-lsp");
    assert.equal(resolveServerCommand({ ...full, exists: all }).command, "/e/llada-lsp");
    assert.equal(resolveServerCommand({ ...full, envPath: "", exists: all }).command, "/usr/bin/llada-lsp");
    assert.equal(resolveServerCommand({ ...full, envPath: "", exists: has("/src/llada/.venv/bin/llada-lsp", "/ws/.venv/bin/llada-lsp") }).command,
      "/src/llada/.venv/bin/llada-lsp");
    assert.equal(resolveServerCommand({ ...full, envPath: "", exists: has("/env/bin/llada-lsp", "/ws/.venv/bin/llada-lsp") }).command, "/env/bin/llada-lsp");
    assert.equal(resolveServerCommand({ ...base, serverPath: "", exists: has("/ws/.venv/bin/llada-lsp") }).command, "/ws/.venv/bin/llada-lsp");
    assert.equal(resolveServerCommand({ ...full, envPath: "", exists: has() }).command, "llada-lsp");
  });

  it("runs no program of an untrusted workspace", () => {
    const base = { serverPath: "", workspaceFolders: ["/ws"], platform: "linux", trusted: false, join: (...p: string[]) => path.posix.join(...p), dirname: (p: string) => path.posix.dirname(p) };
    const venv = (p: string): boolean => p === "/ws/.venv/bin/llada-lsp";
    assert.equal(resolveServerCommand({ ...base, exists: venv }).command, "llada-lsp");
    assert.equal(resolveServerCommand({ ...base, trusted: true, exists: venv }).command, "/ws/.venv/bin/llada-lsp");
  });

  it("takes the machine-scoped settings from the user's settings only", () => {
    assert.equal(machineValue({ defaultValue: "inprocess", workspaceValue: "ws://evil:1", workspaceFolderValue: "ws://evil:2" }, "x"), "inprocess");
    assert.equal(machineValue({ defaultValue: "inprocess", globalValue: "auto", workspaceValue: "ws://evil:1" }, "x"), "auto");
    assert.equal(machineValue<string>(undefined, "inprocess"), "inprocess");
    assert.deepEqual([...MACHINE_SETTINGS].sort(), ["engine", "model", "serverPath"]);
  });

  it("declares the machine-scoped settings so in package.json, restricted in untrusted workspaces", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, "../../package.json"), "utf8")) as {
      contributes: { configuration: { properties: Record<string, { scope?: string }> } };
      capabilities: { untrustedWorkspaces: { supported: string; restrictedConfigurations: string[] } };
    };
    const props = pkg.contributes.configuration.properties;
    for (const key of MACHINE_SETTINGS) {
      assert.equal(props[`llada.${key}`]?.scope, "machine", key);
      assert.ok(pkg.capabilities.untrustedWorkspaces.restrictedConfigurations.includes(`llada.${key}`), key);
    }
    assert.equal(pkg.capabilities.untrustedWorkspaces.supported, "limited");
  });

  it("formats the stats for the status bar", () => {
    assert.equal(formatStats({ completionId: "1", uri: "u", firstMs: 41.6, totalMs: 120.2 }), "llada 42ms → 120ms");
    assert.equal(formatStats({ completionId: "1", uri: "u", firstMs: 0.4, totalMs: 0.5, cacheHit: true }), "llada 0ms (cached)");
  });
});

describe("pass-through settings", () => {
  it("sends only what the user set, machine-scoped ones from the user's settings only", () => {
    const set: Record<string, InspectedValue> = {
      "device": { globalValue: "cuda", workspaceValue: "cpu" },
      "promptTemplate": { workspaceValue: "/ws/evil.jinja" },
      "syntaxCheck": { workspaceValue: false },
      "context.prefixChars": { globalValue: 100 },
      "context.suffixChars": { workspaceFolderValue: 2, globalValue: 3 },
      "maxPromptTokens": { globalValue: null },
      "engineToken": { globalValue: "" },
    };
    const got = passThroughOptions((n) => set[n]);
    assert.deepEqual(got, { device: "cuda", syntaxCheck: false, context: { prefixChars: 100, suffixChars: 2 } });
    const merged = mergeOptions(serverOptions({ ...DEFAULT_SETTINGS, nextEdit: { ...DEFAULT_SETTINGS.nextEdit, threshold: 0.5 } }),
      { ...got, nextEdit: { siteTokens: 2 } });
    assert.deepEqual(merged.nextEdit, { threshold: 0.5, siteTokens: 2 });
    assert.deepEqual(merged.context, { prefixChars: 100, suffixChars: 2 });
    assert.equal(merged.device, "cuda");
    assert.ok(RESTART_SETTINGS.includes("device") && RESTART_SETTINGS.includes("sglang") && !RESTART_SETTINGS.includes("syntaxCheck"));
  });

  it("sends the user's own index limits and exclude patterns only (the server bounds the workspace's)", () => {
    const set: Record<string, InspectedValue> = {
      "workspaceIndex.maxBytes": { globalValue: 1000, workspaceValue: 268435456 },
      "exclude": { workspaceValue: [] },
    };
    assert.deepEqual(passThroughOptions((n) => set[n]), { workspaceIndex: { maxBytes: 1000 } });
  });

  it("declares every pass-through setting in package.json, machine-scoped ones so", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, "../../package.json"), "utf8")) as {
      contributes: { configuration: { properties: Record<string, { scope?: string }> } };
      capabilities: { untrustedWorkspaces: { restrictedConfigurations: string[] } };
    };
    const props = pkg.contributes.configuration.properties;
    for (const o of PASS_THROUGH) {
      assert.ok(props[`llada.${o.name}`], o.name);
      assert.equal(props[`llada.${o.name}`].scope === "machine", o.machine === true, o.name);
      if (o.machine) {
        assert.ok(pkg.capabilities.untrustedWorkspaces.restrictedConfigurations.includes(`llada.${o.name}`), o.name);
      }
    }
  });
});

describe("statusName", () => {
  it("shows a backend other than the native engine", () => {
    assert.equal(statusName({ state: "ready" }), "llada");
    assert.equal(statusName({ state: "ready", engine: {} }), "llada");
    assert.equal(statusName({ state: "ready", engine: { backend: "native" } }), "llada");
    assert.equal(statusName({ state: "error", engine: { backend: "sglang", edits: false } }), "llada[sglang]");
  });
});

describe("the user's settings file (machine-scoped values VS Code drops in a remote window)", () => {
  it("reads settings.json with comments and trailing commas", () => {
    const text = '{\n  // where the server is\n  "llada.serverPath": "/x/y // not a comment",\n  /* block */ "a": [1, 2,],\n  "s": "q\\"uote",\n}\n';
    assert.deepEqual(parseSettingsJson(text), { "llada.serverPath": "/x/y // not a comment", a: [1, 2], s: 'q"uote' });
    assert.equal(parseSettingsJson("{ not json"), undefined);
    assert.deepEqual(parseSettingsJson('{"a": "}"}\n}\n'), { a: "}" }); // a stray brace after it, as VS Code reads it
    assert.equal(parseSettingsJson("[1]"), undefined);
  });

  it("fills in only a user value VS Code does not give", () => {
    const file = { "llada.serverPath": "/from/file" };
    assert.equal(withUserFile({ defaultValue: "" }, "serverPath", file)?.globalValue, "/from/file");
    assert.equal(withUserFile({ globalValue: "/from/vscode" }, "serverPath", file)?.globalValue, "/from/vscode");
    assert.equal(withUserFile({ defaultValue: "" }, "model", file)?.globalValue, undefined);
    // a workspace's value still never counts
    assert.equal(machineValue(withUserFile({ workspaceValue: "/evil", defaultValue: "" }, "model", file), ""), "");
  });
});
