// Records the llada-lsp checkout this extension is built in (out/checkout.json), so that the
// installed extension can find the server in that checkout's .venv (after `./dev demo`) with no
// setting and no PATH edit. Run by `npm run build`; outside a checkout it records nothing.
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../..");
const out = path.resolve(here, "../out/checkout.json");
const pyproject = path.join(root, "pyproject.toml");
const isCheckout = fs.existsSync(pyproject) && /name\s*=\s*"llada-lsp"/.test(fs.readFileSync(pyproject, "utf8"));
fs.mkdirSync(path.dirname(out), { recursive: true });
if (isCheckout) {
  fs.writeFileSync(out, JSON.stringify({ root }) + "\n");
  console.log(`recorded the checkout ${root} in ${path.relative(process.cwd(), out)}`);
} else {
  fs.rmSync(out, { force: true });
}
