// The VS Code side: starts llada-lsp through vscode-languageclient, shows its inline
// completions, re-shows the inline suggestion when `llada/refine` changes the shown one (a
// trigger, after a hide where VS Code would skip the trigger: see reshow), shows the server's state
// and timings in the status bar (./status), and draws next-edit suggestions as decorations
// (llada.nextEdit.jump / accept / dismiss). The protocol logic lives in ./core, ./tracker and ./nextEdit.
import * as fs from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";
import {
  LanguageClient,
  State,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import {
  DEFAULT_SETTINGS,
  machineValue,
  parseSettingsJson,
  withUserFile,
  resolveServerCommand,
  serverOptions,
  type LspInlineItem,
  type RefineParams,
  type Settings,
  type StatsParams,
  type StatusParams,
} from "./core";
import { RESTART_SETTINGS, mergeOptions, passThroughOptions } from "./settings";
import { StatusModel, type StatusView } from "./status";
import { RefineHold, SuggestionTracker, answerFromTracker } from "./tracker";
import { NEXT_EDIT_METHOD, NextEditController, type NextEditDecoration, type NextEditResult } from "./nextEdit";

let client: LanguageClient | undefined;
let status: vscode.StatusBarItem;
const statusModel = new StatusModel();
let output: vscode.LogOutputChannel;
const tracker = new SuggestionTracker();
let ownRetrigger = false; // the next provider call is the extension's re-trigger, not the user's
let invokedAnswered: (() => void) | undefined; // cycling waits for the server's answer with every candidate
let nextEditServer = false; // llada/status says llada/nextEdit can answer
let nextEdits: NextEditController;
let oldTextDecoration: vscode.TextEditorDecorationType;
let newTextDecoration: vscode.TextEditorDecorationType;
let labelDecoration: vscode.TextEditorDecorationType; // "next edit k/N · kind" at a site's line end
let placeholderDecoration: vscode.TextEditorDecorationType; // a suggestion with a placeholder (styled per site)

/** The user's settings file next to the extension's global storage (`<user data>/User/settings.json`,
 * on the machine the extension runs on), read at start and when it changes: its machine-scoped
 * values count where VS Code drops them (core.withUserFile). */
let userSettingsFile: string | undefined;
let userSettings: Record<string, unknown> | undefined;

function readUserSettings(): Record<string, unknown> | undefined {
  try {
    return userSettingsFile ? parseSettingsJson(fs.readFileSync(userSettingsFile, "utf8")) : undefined;
  } catch {
    return undefined; // no such file (a desktop window's is read by VS Code itself)
  }
}

function readSettings(): Settings {
  userSettings = readUserSettings(); // as it is now (a change event may come before the file's)
  const c = vscode.workspace.getConfiguration("llada");
  // machine-scoped (core.MACHINE_SETTINGS): the user's values only, never the workspace's
  const machine = <T>(key: "serverPath" | "engine" | "model", fallback: T): T =>
    machineValue(withUserFile(c.inspect<T>(key), key, userSettings), fallback);
  return {
    mode: c.get<Settings["mode"]>("mode", DEFAULT_SETTINGS.mode),
    engine: machine("engine", DEFAULT_SETTINGS.engine),
    enabledLanguages: c.get<string[]>("enabledLanguages", DEFAULT_SETTINGS.enabledLanguages),
    maxTokens: c.get<Settings["maxTokens"]>("maxTokens", DEFAULT_SETTINGS.maxTokens),
    serverPath: machine("serverPath", DEFAULT_SETTINGS.serverPath),
    model: machine("model", DEFAULT_SETTINGS.model),
    debounceMs: c.get<number>("debounceMs", DEFAULT_SETTINGS.debounceMs),
    alternatives: c.get<number>("alternatives", DEFAULT_SETTINGS.alternatives),
    invokedAlternatives: c.get<number>("invokedAlternatives", DEFAULT_SETTINGS.invokedAlternatives),
    nextEdit: {
      enabled: c.get<boolean>("nextEdit.enabled", DEFAULT_SETTINGS.nextEdit.enabled),
      debounceMs: c.get<number>("nextEdit.debounceMs", DEFAULT_SETTINGS.nextEdit.debounceMs),
      threshold: c.get<number | null>("nextEdit.threshold", DEFAULT_SETTINGS.nextEdit.threshold),
    },
  };
}

/** Every server option the settings give (initializationOptions / workspace/configuration). */
function allServerOptions(): Record<string, unknown> {
  const c = vscode.workspace.getConfiguration("llada");
  return mergeOptions(serverOptions(readSettings()), passThroughOptions((name) => withUserFile(c.inspect(name), name, userSettings)));
}

/** The llada-lsp checkout the extension was built in (out/checkout.json, written by
 * `npm run build`), if it is still there. */
function checkoutRoot(context: vscode.ExtensionContext): string | undefined {
  try {
    const rec = JSON.parse(fs.readFileSync(path.join(context.extensionPath, "out", "checkout.json"), "utf8")) as { root?: unknown };
    return typeof rec.root === "string" && fs.existsSync(rec.root) ? rec.root : undefined;
  } catch {
    return undefined; // not built in a checkout (or the record is unreadable)
  }
}

function serverCommand(settings: Settings, context: vscode.ExtensionContext): ServerOptions & { command: string } {
  const trusted = vscode.workspace.isTrusted;
  const py = vscode.workspace.getConfiguration("python");
  // an untrusted workspace's own interpreter setting is not followed either
  const python = trusted ? py.get<string>("defaultInterpreterPath") : py.inspect<string>("defaultInterpreterPath")?.globalValue;
  const cmd = resolveServerCommand({
    serverPath: settings.serverPath,
    envPath: process.env.LLADA_LSP,
    pathDirs: (process.env.PATH ?? "").split(path.delimiter),
    checkout: checkoutRoot(context),
    pythonPath: python,
    workspaceFolders: (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath),
    trusted,
    platform: process.platform,
    exists: (p) => fs.existsSync(p),
    join: (...parts) => path.join(...parts),
    dirname: (p) => path.dirname(p),
  });
  output.appendLine(`starting ${cmd.command} ${cmd.args.join(" ")}`);
  // a restart the user asked for also asks for the daemon again after `llada-engine stop`
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (explicitRestart) {
    env.LLADA_ENGINE_RESTART = "1";
  }
  return { command: cmd.command, args: cmd.args, options: { env } };
}

function showStatus(v: StatusView): void {
  status.text = v.text;
  status.tooltip = v.tooltip;
  status.command = v.command;
  status.backgroundColor = v.error ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  status.show();
}

/**
 * Show the refined suggestion: an explicit trigger asks the provider again, which answers from
 * the tracker with the newest text at once. VS Code 1.100 asks again only while the suggestion
 * it shows came from an automatic request at this document state (tracker.replacesInPlace),
 * and then keeps the old text on screen until the new one replaces it: no blank frame. Once it
 * shows an explicit request's answer (an earlier refinement's, or cycling's), it answers every
 * trigger there from its own state, so the suggestion is hidden first, and the screen is blank
 * until the provider's answer (one round trip to the extension host). So while the in-place
 * replacement is left, a refinement that is not the engine's last waits for the final one
 * (RefineHold, at most FINAL_HOLD_MS), and the one replacement brings the final text.
 * Refinements that arrive while one is being shown are coalesced into the next.
 */
let reshowing: Promise<void> | undefined; // while a refinement is being shown
// when a refinement is shown: the final text, or the newest after FINAL_HOLD_MS, spends the one
// in-place replacement (tracker.RefineHold); a newer suggestion's answer drops an older one's
const refineHold = new RefineHold((uri, completionId) => {
  if (tracker.get(uri)?.completionId === completionId) {
    scheduleRetrigger(uri);
  }
});
let pendingReshow: string | undefined; // the uri of a refinement not shown yet
function scheduleRetrigger(uri: string): void {
  pendingReshow = uri;
  // cleared once it has run: reshow() may finish at once (nothing to show), and a `finally`
  // inside it would then clear `reshowing` before this assignment set it for good, after
  // which no refinement was ever shown again
  reshowing ??= reshow().finally(() => {
    reshowing = undefined;
  });
}

async function reshow(): Promise<void> {
  while (pendingReshow !== undefined) {
    const uri = pendingReshow;
    pendingReshow = undefined;
    const editor = vscode.window.activeTextEditor;
    if (!editor || !client || client.code2ProtocolConverter.asUri(editor.document.uri) !== uri) {
      continue;
    }
    // only while the document is as it was when the suggestion was asked for (the cursor
    // the extension host knows can lag behind the window's: the provider checks it)
    const shown = tracker.get(uri);
    if (!shown || shown.version !== editor.document.version) {
      output.debug(`refinement of ${shown?.completionId ?? "?"} not shown: the document changed`);
      continue;
    }
    ownRetrigger = true;
    if (tracker.replacesInPlace(uri)) {
      // the command returns once VS Code has taken the provider's answer (or has not asked)
      await vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
      if (!ownRetrigger) {
        continue; // the provider was asked: the newer text replaced the old one in place
      }
      output.debug(`refinement of ${shown.completionId}: the trigger did not ask again; hiding first`);
    }
    // sent together: the window runs them in order, and the trigger's provider call is then
    // the only round trip between the extension host and the window
    await Promise.all([
      vscode.commands.executeCommand("editor.action.inlineSuggest.hide"),
      vscode.commands.executeCommand("editor.action.inlineSuggest.trigger"),
    ]);
  }
}

/**
 * Alt+] / Alt+[: VS Code answers the explicit fetch these run from the shown suggestion when it
 * came from an explicit request at the same place (as every re-shown refinement does), so it
 * would never ask for the other candidates. While the shown suggestion has none, hide it and
 * trigger again without marking the request the extension's own: the provider then asks the
 * server (triggerKind Invoked), which decodes and answers every candidate; then cycle.
 */
async function cycle(direction: "next" | "previous"): Promise<void> {
  await reshowing; // a refinement being shown first
  const editor = vscode.window.activeTextEditor;
  const uri = editor && uriOf(editor.document);
  const shown = uri ? tracker.get(uri) : undefined;
  if (shown && shown.others.length === 0) {
    // the explicit request's answer (every candidate) must be VS Code's list before it cycles
    const answered = new Promise<void>((resolve) => {
      invokedAnswered = resolve;
      setTimeout(resolve, 3000); // no answer (nothing to show): cycle what there is
    });
    await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
    ownRetrigger = false;
    await vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
    await answered;
  }
  await vscode.commands.executeCommand(`editor.action.inlineSuggest.show${direction === "next" ? "Next" : "Previous"}`);
  // the counter in the status bar item (VS Code shows its own only on hover): VS Code moves
  // through the items in the order given, wrapping
  const now = uri ? tracker.get(uri) : undefined;
  if (!editor || !now || now.version !== editor.document.version) {
    return;
  }
  const count = new Set([now.text, ...now.others]).size;
  const key = `${now.uri} ${now.version} ${now.completionId}`;
  const from = cycled?.key === key ? cycled.index : 0;
  const index = (from + (direction === "next" ? 1 : -1) + count) % count;
  cycled = { key, index };
  showStatus(statusModel.showCandidate(now.completionId, index + 1, count));
}

/** Which candidate cycling shows (0-based), for the suggestion `key` (uri, version, completion). */
let cycled: { key: string; index: number } | undefined;

function toLspItems(result: vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined): LspInlineItem[] {
  const items = Array.isArray(result) ? result : (result?.items ?? []);
  return items.map((it) => ({
    insertText: typeof it.insertText === "string" ? it.insertText : it.insertText.value,
    range: it.range ? {
      start: { line: it.range.start.line, character: it.range.start.character },
      end: { line: it.range.end.line, character: it.range.end.character },
    } : undefined,
    command: it.command
      ? { title: it.command.title, command: it.command.command, arguments: it.command.arguments }
      : undefined,
  }));
}

function clientOptions(): LanguageClientOptions {
  let lastItems: vscode.InlineCompletionItem[] = [];
  return {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    outputChannel: output,
    initializationOptions: allServerOptions(),
    middleware: {
      // The server's textDocument/completion (the same texts as completion items) is for
      // editors without inline completion. Here its items would fill the suggest widget, where
      // VS Code shows ghost text only when it continues the selected item: llada's own item
      // selected, the ghost text would go. The inline suggestion covers it; no request is sent.
      provideCompletionItem: () => undefined,
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        const uri = client!.code2ProtocolConverter.asUri(document.uri);
        const pos = { line: position.line, character: position.character };
        const selected = context.selectedCompletionInfo?.text;
        const version = document.version; // the document object is live: its version at the call
        const known = tracker.lookup(uri, version, pos, selected);
        const own = ownRetrigger;
        ownRetrigger = false;
        const invoked = context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke;
        if (known && lastItems.length > 0 && answerFromTracker(known, invoked, own)) {
          // Same document state as the shown suggestion: its refined text, then the other candidates.
          const r = known.range;
          const range = r ? new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character)
            : new vscode.Range(position, position);
          tracker.noteAnswer(uri, version, pos, invoked);
          return [known.text, ...known.others].map(
            (text, i) => new vscode.InlineCompletionItem(text, range, lastItems[Math.min(i, lastItems.length - 1)].command));
        }
        const result = await next(document, position, context, token);
        if (invoked && invokedAnswered) {
          // after this answer has gone back to VS Code (a later task than this return)
          const done = invokedAnswered;
          invokedAnswered = undefined;
          setTimeout(done, 0);
        }
        if (token.isCancellationRequested || document.version !== version) {
          // a stale answer (VS Code has asked again since, or the text changed): VS Code drops
          // it, and it must not replace the newer suggestion the tracker may already follow
          // (whose refinements would then be lost)
          return result;
        }
        const items = toLspItems(result);
        tracker.noteAnswer(uri, version, pos, invoked);
        const shown = tracker.remember(uri, version, pos, items, selected);
        if (invoked && shown) {
          statusModel.noteCycled(shown.completionId);
        }
        lastItems = Array.isArray(result) ? result : (result?.items ?? []);
        if (shown && lastItems.length > 0 && shown.text !== items[0].insertText) {
          // refinements that overtook the answer: show the newest text at once
          const first = lastItems[0];
          return [new vscode.InlineCompletionItem(shown.text, first.range, first.command), ...lastItems.slice(1)];
        }
        return result;
      },
      workspace: {
        // The server pulls section "llada": answer with its option names, not VS Code's.
        configuration: (params, token, next) => {
          if (params.items.some((i) => i.section === "llada")) {
            return params.items.map((i) => (i.section === "llada" ? allServerOptions() : null));
          }
          return next(params, token);
        },
      },
    },
  };
}

// -- next-edit suggestions ------------------------------------------------------------------
function uriOf(doc: vscode.TextDocument): string | undefined {
  return client?.code2ProtocolConverter.asUri(doc.uri);
}

function editorOf(uri: string): vscode.TextEditor | undefined {
  return vscode.window.visibleTextEditors.find((e) => uriOf(e.document) === uri);
}

const toRange = (r: { start: { line: number; character: number }; end: { line: number; character: number } }): vscode.Range =>
  new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);

const INSERTED = new vscode.ThemeColor("diffEditor.insertedTextBackground");
const NEW_TEXT = { backgroundColor: INSERTED };
// a placeholder: the inserted text's colours, italic in a dashed box (the part to type over)
const PLACEHOLDER = { backgroundColor: INSERTED, fontStyle: "italic", border: "1px dashed",
  borderColor: new vscode.ThemeColor("editorInfo.foreground") };

/** The new text of a site with a placeholder, at one point: its parts as the decoration's `before`
 * and `after` (VS Code draws every `before` at a point ahead of every `after`). The analysis' sites
 * have text on one side of the placeholder at most; with both, the rest goes in the placeholder's box. */
function placeholderOptions(p: NonNullable<NextEditDecoration["placeholder"]>, replaces: boolean): vscode.DecorationInstanceRenderOptions {
  const margin = replaces ? "0 0 0 0.5em" : "0"; // apart from the struck-out text; an insertion stays in place
  if (p.after === "") {
    return { before: { contentText: p.before, ...NEW_TEXT, margin }, after: { contentText: p.text, ...PLACEHOLDER } };
  }
  if (p.before === "") {
    return { before: { contentText: p.text, ...PLACEHOLDER, margin }, after: { contentText: p.after, ...NEW_TEXT } };
  }
  return { before: { contentText: p.before, ...NEW_TEXT, margin }, after: { contentText: p.text + p.after, ...PLACEHOLDER } };
}

function renderNextEdits(uri: string, decorations: NextEditDecoration[]): void {
  const editor = editorOf(uri);
  if (editor) {
    const at = (d: NextEditDecoration): vscode.Range => new vscode.Range(toRange(d.range).end, toRange(d.range).end);
    editor.setDecorations(oldTextDecoration, decorations.map((d) => ({ range: toRange(d.range), hoverMessage: d.hover })));
    editor.setDecorations(newTextDecoration, decorations.filter((d) => !d.placeholder).map((d) => ({
      range: at(d),
      renderOptions: { after: { contentText: d.after } },
    })));
    editor.setDecorations(placeholderDecoration, decorations.filter((d) => d.placeholder).map((d) => ({
      range: at(d),
      hoverMessage: d.hover,
      renderOptions: placeholderOptions(d.placeholder!, !toRange(d.range).isEmpty),
    })));
    editor.setDecorations(labelDecoration, decorations.map((d) => {
      const end = editor.document.lineAt(d.range.end.line).range.end;
      return { range: new vscode.Range(end, end), renderOptions: { after: { contentText: `  ${d.label}` } } };
    }));
  }
  const active = vscode.window.activeTextEditor;
  if (active && uriOf(active.document) === uri) {
    void vscode.commands.executeCommand("setContext", "llada.nextEditVisible", decorations.length > 0);
  }
}

function makeNextEdits(): NextEditController {
  return new NextEditController({
    send: (params) => client ? client.sendRequest<NextEditResult>(NEXT_EDIT_METHOD, params) : Promise.reject(new Error("no client")),
    version: (uri) => vscode.workspace.textDocuments.find((d) => uriOf(d) === uri)?.version,
    cursor: (uri) => {
      const e = vscode.window.activeTextEditor;
      return e && uriOf(e.document) === uri ? { line: e.selection.active.line, character: e.selection.active.character } : undefined;
    },
    render: renderNextEdits,
    enabled: () => nextEditServer && readSettings().nextEdit.enabled,
    log: (m) => output.appendLine(m),
  }, readSettings().nextEdit.debounceMs);
}

function onEdit(e: vscode.TextDocumentChangeEvent): void {
  if (cycled && e.contentChanges.length > 0) {
    cycled = undefined; // the candidate counter goes with the suggestion
    showStatus(statusModel.clearCandidate());
  }
  const uri = uriOf(e.document);
  if (!uri || e.contentChanges.length === 0 || vscode.window.activeTextEditor?.document !== e.document) {
    return;
  }
  // the lines the change touched, as the document is now
  const first = Math.min(...e.contentChanges.map((c) => c.range.start.line));
  const last = Math.max(...e.contentChanges.map((c) => c.range.start.line + c.text.split("\n").length - 1));
  nextEdits.changed(uri, { start: { line: first, character: 0 }, end: { line: last, character: 0 } });
}

function jumpToNextEdit(): void {
  const editor = vscode.window.activeTextEditor;
  const uri = editor && uriOf(editor.document);
  const at = uri && nextEdits.jump(uri, editor.selection.active);
  if (editor && at) {
    const pos = new vscode.Position(at.line, at.character);
    editor.selection = new vscode.Selection(pos, pos);
    editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }
}

async function acceptNextEdit(): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  const uri = editor && uriOf(editor.document);
  const edit = uri && nextEdits.accept(uri, editor.selection.active);
  if (editor && edit && await editor.edit((b) => b.replace(toRange(edit.range), edit.newText)) && edit.select) {
    // the placeholder selected: what the user types replaces it
    const sel = toRange(edit.select);
    editor.selection = new vscode.Selection(sel.start, sel.end);
    editor.revealRange(sel, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }
}

async function acceptAllNextEdits(): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  const uri = editor && uriOf(editor.document);
  const edits = uri ? nextEdits.acceptAll(uri) : [];
  if (editor && edits.length > 0) {
    await editor.edit((b) => edits.forEach((e) => b.replace(toRange(e.range), e.newText)));
  }
}

async function start(context: vscode.ExtensionContext): Promise<void> {
  const settings = readSettings();
  const command = serverCommand(settings, context);
  showStatus(statusModel.starting(command.command));
  const c = new LanguageClient("llada", "llada", command, clientOptions());
  client = c;
  client.onNotification("llada/refine", (p: RefineParams) => {
    const changed = tracker.refine(p) !== undefined;
    const s = tracker.get(p.uri);
    if (s && s.completionId === String(p.completionId)) {
      refineHold.refined(s, changed, tracker.replacesInPlace(p.uri));
    }
  });
  client.onNotification("llada/stats", (s: StatsParams) => {
    if (client === c) {
      showStatus(statusModel.onStats(s));
    }
  });
  client.onNotification("llada/status", (s: StatusParams) => {
    nextEditServer = s.state === "ready" && s.nextEdit === true;
    if (client === c) {
      showStatus(statusModel.onStatus(s));
    }
  });
  client.onDidChangeState((e) => {
    if (client === c && e.newState === State.Stopped) {
      showStatus(statusModel.stopped());
    }
  });
  try {
    await client.start();
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    output.appendLine(`the server did not start: ${reason}`);
    if (client === c) {
      showStatus(statusModel.failed(reason));
    }
    return;
  }
  context.subscriptions.push({ dispose: () => void c.stop() });
}

let explicitRestart = false;

async function restart(context: vscode.ExtensionContext, explicit = false): Promise<void> {
  explicitRestart = explicit;
  const old = client;
  client = undefined;
  if (old) {
    try {
      await old.stop();
    } catch (err) {
      output.appendLine(`stopping the old server: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  await start(context);
}

/** Follow the user's settings file (see userSettingsFile): a change of a machine-scoped llada
 * value there restarts the server (VS Code, having dropped it, says nothing). */
function watchUserSettings(context: vscode.ExtensionContext): void {
  userSettingsFile = path.join(path.dirname(path.dirname(context.globalStorageUri.fsPath)), "settings.json");
  userSettings = readUserSettings();
  output.appendLine(`user settings file: ${userSettingsFile} (${userSettings ? "read" : "not read"}; remote: ${vscode.env.remoteName ?? "none"})`);
  const machineKeys = (): string => JSON.stringify(RESTART_SETTINGS.map((k) => userSettings?.[`llada.${k}`]));
  const dir = path.dirname(userSettingsFile);
  try {
    const watcher = fs.watch(dir, { persistent: false }, (_event, name) => {
      if (name !== null && name !== path.basename(userSettingsFile!)) {
        return;
      }
      const before = machineKeys();
      userSettings = readUserSettings();
      if (machineKeys() !== before && client) {
        output.appendLine(`${userSettingsFile} changed: restarting`);
        void restart(context);
      }
    });
    context.subscriptions.push({ dispose: () => watcher.close() });
  } catch {
    // no such folder: nothing to follow
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("llada", { log: true });
  watchUserSettings(context);
  status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  status.command = "llada.showStats";
  oldTextDecoration = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
    textDecoration: "line-through",
  });
  newTextDecoration = vscode.window.createTextEditorDecorationType({
    after: { backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"), margin: "0 0 0 0.5em" },
  });
  labelDecoration = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor("editorCodeLens.foreground"), fontStyle: "italic", margin: "0 0 0 1em" },
  });
  placeholderDecoration = vscode.window.createTextEditorDecorationType({});
  nextEdits = makeNextEdits();
  context.subscriptions.push(output, status, oldTextDecoration, newTextDecoration, labelDecoration, placeholderDecoration);
  context.subscriptions.push(
    vscode.commands.registerCommand("llada.restartServer", () => restart(context, true)),
    vscode.commands.registerCommand("llada.showStats", async () => {
      const info: unknown = client ? await client.sendRequest("llada/debugInfo", {}) : { state: "not running" };
      output.appendLine(JSON.stringify(info, null, 2));
      output.show(true);
    }),
    vscode.commands.registerCommand("llada.toggle", async () => {
      const c = vscode.workspace.getConfiguration("editor");
      await c.update("inlineSuggest.enabled", !c.get<boolean>("inlineSuggest.enabled", true), vscode.ConfigurationTarget.Global);
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration("llada") || !client) {
        return;
      }
      nextEdits.debounceMs = readSettings().nextEdit.debounceMs;
      if (RESTART_SETTINGS.some((k) => e.affectsConfiguration(`llada.${k}`))) {
        await restart(context);
      } else {
        await client.sendNotification("workspace/didChangeConfiguration", { settings: allServerOptions() });
      }
    }),
    vscode.commands.registerCommand("llada.inlineSuggest.next", () => cycle("next")),
    vscode.commands.registerCommand("llada.inlineSuggest.previous", () => cycle("previous")),
    vscode.commands.registerCommand("llada.nextEdit.jump", jumpToNextEdit),
    vscode.commands.registerCommand("llada.nextEdit.accept", acceptNextEdit),
    vscode.commands.registerCommand("llada.nextEdit.acceptAll", acceptAllNextEdits),
    vscode.commands.registerCommand("llada.nextEdit.dismiss", () => {
      const editor = vscode.window.activeTextEditor;
      const uri = editor && uriOf(editor.document);
      if (uri) {
        nextEdits.clear(uri);
      }
    }),
    vscode.workspace.onDidChangeTextDocument(onEdit),
    vscode.window.onDidChangeActiveTextEditor((e) => {
      const uri = e && uriOf(e.document);
      nextEdits.switched(uri || undefined);
      void vscode.commands.executeCommand("setContext", "llada.nextEditVisible", !!uri && nextEdits.suggestions(uri).length > 0);
    }),
    vscode.workspace.onDidCloseTextDocument((d) => {
      tracker.forget(d.uri.toString());
      refineHold.forget(d.uri.toString());
      const uri = uriOf(d);
      if (uri) {
        nextEdits.forget(uri);
      }
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => restart(context)), // its .venv may now be used
  );
  await start(context);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
