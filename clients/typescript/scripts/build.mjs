// build.mjs: compiles src/ twice, as ES modules into dist/ and as
// CommonJS into dist/cjs/ (which a package.json there marks so), after
// emptying dist/ so a pack never ships a file the sources no longer make.
// `npm run build` and `npm pack` (prepack) run it.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
rmSync(join(root, "dist"), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.json")], { stdio: "inherit" });
execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.cjs.json")], { stdio: "inherit" });
mkdirSync(join(root, "dist", "cjs"), { recursive: true });
writeFileSync(join(root, "dist", "cjs", "package.json"), '{"type":"commonjs"}\n');
