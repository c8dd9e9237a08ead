// The real llada-lsp for the node tests (server.test.ts, nextEdit.test.ts): this checkout's
// server over stdio through vscode-jsonrpc, with a trained model found as the Python tests find
// it ($LLADA_MODEL, the embedded checkpoint, the latest training run). No mocks.
import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from "vscode-jsonrpc/node";

export const ROOT = path.resolve(__dirname, "../../../..");

export function modelDir(): string | undefined {
  const cands = [process.env.LLADA_MODEL, path.join(ROOT, "engine/checkpoints/tiny-code"), path.join(ROOT, "runs/embedded/latest")];
  return cands.find((c): c is string => !!c && fs.existsSync(path.join(c, "config.json")));
}

/** $LLADA_LSP, else the checkout's .venv, else the module with python3. */
export function serverCommand(): [string, string[]] {
  if (process.env.LLADA_LSP) {
    return [process.env.LLADA_LSP, []];
  }
  const venv = path.join(ROOT, ".venv/bin/llada-lsp");
  return fs.existsSync(venv) ? [venv, []] : ["python3", ["-m", "llada_lsp"]];
}

export interface RealServer {
  proc: ChildProcess;
  conn: MessageConnection;
}

/** Start the server on `model` (one thread unless OMP_NUM_THREADS says otherwise); `handlers`
 * registers the test's notification and request handlers before the connection listens. */
export function startServer(model: string, handlers: (conn: MessageConnection) => void): RealServer {
  const [cmd, args] = serverCommand();
  const proc = spawn(cmd, args, {
    cwd: ROOT,
    env: { ...process.env, LLADA_MODEL: model, OMP_NUM_THREADS: process.env.OMP_NUM_THREADS ?? "1" },
    stdio: ["pipe", "pipe", process.env.LLADA_TEST_VERBOSE ? "inherit" : "ignore"],
  });
  const conn = createMessageConnection(new StreamMessageReader(proc.stdout), new StreamMessageWriter(proc.stdin));
  handlers(conn);
  conn.listen();
  return { proc, conn };
}

/** Shut the server down (shutdown, exit) and end its process. */
export async function stopServer(server: RealServer | undefined): Promise<void> {
  if (!server) {
    return;
  }
  await server.conn.sendRequest("shutdown").catch(() => undefined);
  await server.conn.sendNotification("exit").catch(() => undefined);
  server.conn.dispose();
  server.proc.kill();
}
