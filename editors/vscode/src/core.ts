// Protocol logic of the extension (the shown suggestion's tracker is ./tracker), free of the
// `vscode` module so that node's test runner can drive it against the real server
// (test/server.test.ts).

/** A position or range as LSP sends them (characters in UTF-16 code units, as JS strings). */
export interface LspPosition {
  line: number;
  character: number;
}
export interface LspRange {
  start: LspPosition;
  end: LspPosition;
}
export interface LspTextEdit {
  range: LspRange;
  newText: string;
}

/** `llada/refine`: edits against the suggestion of one completion (docs/lsp.md). */
export interface RefineParams {
  completionId: string;
  uri: string;
  version: number;
  edits: LspTextEdit[];
  text?: string;
  step: number;
  final: boolean;
  reason?: string;
}

/** `llada/stats`: timings of one completion. */
export interface StatsParams {
  completionId: string;
  uri: string;
  kind?: string;
  source?: string;
  cacheHit?: boolean;
  /** false: the answer came out empty (nothing was shown); absent from older servers */
  shown?: boolean;
  /** with `shown: false`: why nothing was shown (e.g. "adds a parse error") */
  emptyReason?: string;
  queueMs?: number;
  forwards?: number;
  tokens?: number;
  tpf?: number;
  firstMs?: number;
  totalMs?: number;
  engineMs?: number;
  overheadMs?: number;
  alternatives?: number; // other candidates the engine returned
  groupForwards?: number; // forwards until the last of them finished
}

/** `llada/status`: the engine's state, and what the engine is (its capabilities). */
export interface StatusParams {
  state: string; // "loading" | "ready" | "error"
  message?: string;
  nextEdit?: boolean; // llada/nextEdit can answer with suggestions
  pace?: string; // "" | "warming" | "slow: 3.1 s/step" | "stuck: <why>" (a ready engine's speed)
  engine?: { backend?: string; granularity?: string; edits?: boolean; presets?: string[] };
}

/** The status bar's name for the server: "llada", or "llada[sglang]" when completions come
 * from another backend than the native engine (block-granular, no refinements). */
export function statusName(s: StatusParams | undefined): string {
  const backend = s?.engine?.backend;
  return backend && backend !== "native" ? `llada[${backend}]` : "llada";
}

/** The part of an LSP inline completion item the extension uses. */
export interface LspInlineItem {
  insertText: string | { kind?: string; value: string };
  range?: LspRange;
  command?: { title: string; command: string; arguments?: unknown[] };
}

/** Offset of `pos` in `text` (UTF-16 units, the encoding VS Code negotiates). */
export function offsetAt(text: string, pos: LspPosition): number {
  let offset = 0;
  for (let line = 0; line < pos.line; line++) {
    const nl = text.indexOf("\n", offset);
    if (nl < 0) {
      return text.length;
    }
    offset = nl + 1;
  }
  const end = text.indexOf("\n", offset);
  const lineEnd = end < 0 ? text.length : end;
  return Math.min(offset + pos.character, lineEnd);
}

/** Apply LSP text edits whose ranges all refer to the original `text`. */
export function applyEdits(text: string, edits: readonly LspTextEdit[]): string {
  const spans = edits
    .map((e) => ({ start: offsetAt(text, e.range.start), end: offsetAt(text, e.range.end), text: e.newText }))
    .sort((a, b) => b.start - a.start);
  let out = text;
  for (const s of spans) {
    out = out.slice(0, s.start) + s.text + out.slice(s.end);
  }
  return out;
}

/** The completion id the server puts in an item's accept command. */
export function completionIdOf(item: Pick<LspInlineItem, "command">): string | undefined {
  const arg = item.command?.arguments?.[0];
  return typeof arg === "string" || typeof arg === "number" ? String(arg) : undefined;
}

export function insertTextOf(item: LspInlineItem): string {
  return typeof item.insertText === "string" ? item.insertText : item.insertText.value;
}

/** The status bar text for the latest stats, e.g. "llada 42ms" or "llada 42ms → 120ms". */
export function formatStats(s: StatsParams): string {
  const first = Math.round(s.firstMs ?? 0);
  const total = Math.round(s.totalMs ?? 0);
  let out = `llada ${first}ms`;
  if (total > first + 1) {
    out += ` → ${total}ms`;
  }
  if (s.cacheHit) {
    out += " (cached)";
  }
  return out;
}

/** A multi-line tooltip with every timing of the stats. */
export function describeStats(s: StatsParams): string {
  const f = (v: number | undefined, d = 0): string => (v ?? 0).toFixed(d);
  return [
    `completion ${s.completionId} (${s.kind ?? "?"}, ${s.source ?? "engine"})`,
    `first suggestion ${f(s.firstMs)} ms, final ${f(s.totalMs)} ms`,
    `engine ${f(s.engineMs)} ms, queue ${f(s.queueMs)} ms, server overhead ${f(s.overheadMs, 1)} ms`,
    `${s.forwards ?? 0} forwards, ${s.tokens ?? 0} tokens, ${f(s.tpf, 2)} tokens/forward`,
    ...(s.alternatives ? [`${s.alternatives} alternatives, ${s.groupForwards ?? 0} forwards in all`] : []),
  ].join("\n");
}

/** The extension's settings (package.json `contributes.configuration`). */
export interface Settings {
  mode: "speedy" | "quality";
  engine: string;
  enabledLanguages: string[];
  maxTokens: { line?: number; statements?: number; block?: number };
  serverPath: string;
  model: string;
  debounceMs: number;
  /** Candidates from the most likely first tokens (0: the mode's default). */
  alternatives: number;
  /** Candidates an explicitly invoked request (next/previous suggestion) decodes at least. */
  invokedAlternatives: number;
  /** Next-edit suggestions: sent after edits (client-side debounce); the server's fill threshold. */
  nextEdit: { enabled: boolean; debounceMs: number; threshold: number | null };
}

export const DEFAULT_SETTINGS: Settings = {
  mode: "speedy",
  engine: "inprocess",
  enabledLanguages: ["*"],
  maxTokens: {},
  serverPath: "",
  model: "",
  debounceMs: 0,
  alternatives: 0,
  invokedAlternatives: 4,
  nextEdit: { enabled: true, debounceMs: 300, threshold: null },
};

/**
 * Settings that run a program or send the user's text and token elsewhere. They are
 * `"scope": "machine"` in package.json, and only the user's own (global) value counts here
 * too: a workspace's `.vscode/settings.json` could otherwise point the engine at any URL.
 */
export const MACHINE_SETTINGS = ["serverPath", "engine", "model"] as const;

/** What `WorkspaceConfiguration.inspect` returns, in part. */
export interface Inspected<T> {
  defaultValue?: T;
  globalValue?: T;
  workspaceValue?: T;
  workspaceFolderValue?: T;
}

/** A machine-scoped setting: the user's value, else the default; workspace values never count. */
export function machineValue<T>(inspected: Inspected<T> | undefined, fallback: T): T {
  return inspected?.globalValue ?? inspected?.defaultValue ?? fallback;
}

/**
 * `inspected` with the user's settings file's value of `key` as its user value when VS Code gives
 * none. In a remote window (code-server, Remote-SSH, WSL) VS Code drops machine-scoped settings
 * from the user's settings file, once it knows their scope (only the remote's own settings
 * count); under code-server that file is on the machine the extension runs on, and it is where
 * `./dev paths` says to put them. `userFile`: that file's settings (`llada.<key>`), if read.
 */
export function withUserFile<T>(inspected: Inspected<T> | undefined, key: string,
  userFile: Record<string, unknown> | undefined): Inspected<T> | undefined {
  if (inspected?.globalValue !== undefined || !userFile || !(`llada.${key}` in userFile)) {
    return inspected;
  }
  return { ...inspected, globalValue: userFile[`llada.${key}`] as T };
}

/** VS Code's settings.json (JSON with comments and trailing commas) as an object; undefined
 * when it is not one. */
export function parseSettingsJson(text: string): Record<string, unknown> | undefined {
  let out = "";
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === '"') { // a string, escapes included, copied as it is
      let j = i + 1;
      while (j < text.length && text[j] !== '"') {
        j += text[j] === "\\" ? 2 : 1;
      }
      out += text.slice(i, j + 1);
      i = j + 1;
    } else if (c === "/" && text[i + 1] === "/") {
      const nl = text.indexOf("\n", i);
      i = nl < 0 ? text.length : nl;
    } else if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      i = end < 0 ? text.length : end + 2;
    } else {
      out += c;
      i += 1;
    }
  }
  // VS Code reads past what follows the top-level object (a stray `}` an editor's bracket
  // closing left): so does this
  const start = out.indexOf("{");
  let depth = 0;
  let end = out.length;
  for (let k = Math.max(start, 0), inString = false; k < out.length; k++) {
    const ch = out[k];
    if (inString) {
      if (ch === "\\") {
        k++;
      } else if (ch === '"') {
        inString = false;
      }
    } else if (ch === '"') {
      inString = true;
    } else if (ch === "{" || ch === "[") {
      depth++;
    } else if ((ch === "}" || ch === "]") && --depth === 0) {
      end = k + 1;
      break;
    }
  }
  try {
    const v: unknown = JSON.parse(out.slice(0, end).replace(/,(\s*[}\]])/g, "$1"));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? v as Record<string, unknown> : undefined;
  } catch {
    return undefined;
  }
}

/** The server's options (initializationOptions / workspace/configuration "llada"). */
export function serverOptions(s: Settings): Record<string, unknown> {
  const out: Record<string, unknown> = {
    mode: s.mode,
    engine: s.engine || "inprocess",
    languages: s.enabledLanguages.length > 0 ? s.enabledLanguages : ["*"],
    debounceMs: s.debounceMs,
  };
  const mt: Record<string, number> = {};
  for (const k of ["line", "statements", "block"] as const) {
    const v = s.maxTokens[k];
    if (typeof v === "number" && v > 0) {
      mt[k] = Math.floor(v);
    }
  }
  if (Object.keys(mt).length > 0) {
    out.maxTokens = mt;
  }
  if (s.model) {
    out.model = s.model;
  }
  if (s.alternatives > 0) {
    out.alternatives = Math.min(8, Math.floor(s.alternatives));
  }
  if (s.invokedAlternatives !== DEFAULT_SETTINGS.invokedAlternatives) {
    out.invokedAlternatives = Math.max(0, Math.min(8, Math.floor(s.invokedAlternatives)));
  }
  const ne: Record<string, unknown> = {};
  const d = DEFAULT_SETTINGS.nextEdit;
  if (s.nextEdit.enabled !== d.enabled) {
    ne.enabled = s.nextEdit.enabled;
  }
  if (typeof s.nextEdit.threshold === "number" && s.nextEdit.threshold > 0 && s.nextEdit.threshold <= 1) {
    ne.threshold = s.nextEdit.threshold;
  }
  if (Object.keys(ne).length > 0) {
    out.nextEdit = ne; // the server's side; the debounce is the extension's
  }
  return out;
}

export interface ServerCommand {
  command: string;
  args: string[];
}

/**
 * Where `llada-lsp` is, first found: the `llada.serverPath` setting, `$LLADA_LSP`, `llada-lsp`
 * on PATH, the `.venv` of the llada-lsp checkout the extension was built in (`checkout`,
 * recorded at build time: `./dev demo` creates it), next to the Python interpreter the
 * workspace uses (`python.defaultInterpreterPath`), a workspace `.venv`. A workspace's own
 * programs (its `.venv`) are only run when the workspace is trusted. None found: the bare name,
 * whose spawn error the status item then shows.
 */
export function resolveServerCommand(opts: {
  serverPath: string;
  envPath?: string; // $LLADA_LSP
  pathDirs?: readonly string[]; // $PATH, split
  checkout?: string; // the llada-lsp checkout the extension was built in
  pythonPath?: string;
  workspaceFolders: readonly string[];
  trusted: boolean;
  platform: string;
  exists: (path: string) => boolean;
  join: (...parts: string[]) => string;
  dirname: (path: string) => string;
}): ServerCommand {
  const win = opts.platform === "win32";
  const exe = win ? "llada-lsp.exe" : "llada-lsp";
  const bin = win ? "Scripts" : "bin";
  if (opts.serverPath) {
    return { command: opts.serverPath, args: [] };
  }
  if (opts.envPath) {
    return { command: opts.envPath, args: [] };
  }
  const candidates: string[] = (opts.pathDirs ?? []).filter((d) => d).map((d) => opts.join(d, exe));
  if (opts.checkout) {
    candidates.push(opts.join(opts.checkout, ".venv", bin, exe));
  }
  if (opts.pythonPath && opts.pythonPath !== "python" && opts.pythonPath !== "python3") {
    candidates.push(opts.join(opts.dirname(opts.pythonPath), exe));
  }
  for (const folder of opts.trusted ? opts.workspaceFolders : []) {
    candidates.push(opts.join(folder, ".venv", bin, exe));
  }
  const found = candidates.find((c) => opts.exists(c));
  return { command: found ?? "llada-lsp", args: [] };
}
