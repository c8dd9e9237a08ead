// The server options (docs/lsp.md "Options") that the extension passes through as they are:
// each has a VS Code setting of the same name under `llada.` (package.json), and is sent to the
// server only when the user set it, so that the server's own default applies otherwise. The
// settings with logic of their own (mode, engine, enabledLanguages, maxTokens, model, ...) are
// in ./core's `serverOptions`. Free of the `vscode` module (tested by node's runner).

/** One pass-through option: its setting (and server option) name, whether only the user's own
 * value counts (`"scope": "machine"`), and whether it takes effect at start-up only. */
export interface PassThrough {
  name: string;
  machine?: boolean;
  restart?: boolean;
  /** The server bounds a workspace's value by the user's own (the index limits, `exclude`), so
   * only the user's own value is sent as theirs; the workspace's reaches the server through
   * `workspace/configuration`, where it can only lower a limit or add a pattern. */
  userOnly?: boolean;
}

export const PASS_THROUGH: readonly PassThrough[] = [
  { name: "context.prefixChars" },
  { name: "context.suffixChars" },
  { name: "context.importsChars" },
  { name: "sglang", machine: true, restart: true },
  { name: "engineToken", machine: true, restart: true },
  { name: "device", machine: true, restart: true },
  { name: "maxPromptTokens", restart: true },
  { name: "promptTemplate", machine: true, restart: true },
  { name: "dtype", machine: true, restart: true },
  { name: "threads", machine: true, restart: true },
  { name: "promptFormat", machine: true, restart: true },
  { name: "workspaceIndex.maxFiles", userOnly: true },
  { name: "workspaceIndex.maxBytes", userOnly: true },
  { name: "exclude", userOnly: true },
  { name: "nextEdit.siteTokens" },
  { name: "namesConstraint" },
  { name: "namesKeepOwnAbove" },
  { name: "maxFileBytes" },
  { name: "cacheSize" },
  { name: "syntaxCheck" },
  { name: "syntaxRemaskPasses" },
  { name: "speculative" },
  { name: "maxLines" },
  { name: "rescueAlternatives" },
  { name: "engineFirstEventMs" },
  { name: "engineTimeoutMs" },
  { name: "workspaceContext" },
  { name: "contextTokens" },
];

/** What `WorkspaceConfiguration.inspect` returns, in part. */
export interface InspectedValue {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/** The value the user set (none: undefined). A machine-scoped one counts from the user's
 * settings only; an empty string or null means "the server's default". */
export function setValue(inspected: InspectedValue | undefined, machine: boolean): unknown {
  const v = machine ? inspected?.globalValue
    : inspected?.workspaceFolderValue ?? inspected?.workspaceValue ?? inspected?.globalValue;
  return v === null || v === "" ? undefined : v;
}

/** The pass-through options the user set, nested as the server takes them
 * (`context.prefixChars` -> `{context: {prefixChars}}`). */
export function passThroughOptions(inspect: (name: string) => InspectedValue | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const o of PASS_THROUGH) {
    const v = setValue(inspect(o.name), o.machine === true || o.userOnly === true);
    if (v === undefined) {
      continue;
    }
    const parts = o.name.split(".");
    let at = out;
    for (const p of parts.slice(0, -1)) {
      at = (at[p] ??= {}) as Record<string, unknown>;
    }
    at[parts[parts.length - 1]] = v;
  }
  return out;
}

/** `extra` merged into `base`, one level of nesting deep (`context`, `nextEdit`). */
export function mergeOptions(base: Record<string, unknown>, extra: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(extra)) {
    const b = out[k];
    out[k] = isObject(b) && isObject(v) && k !== "sglang" ? { ...b, ...v } : v;
  }
  return out;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Settings whose change restarts the server (the server reads them at start-up only). */
export const RESTART_SETTINGS: readonly string[] = ["serverPath", "engine", "model",
  ...PASS_THROUGH.filter((o) => o.restart).map((o) => o.name)];
