// Packages the bundled extension as rein-<version>.vsix. Copies the rein binary into bin/
// when one is given (REIN_BIN) or built (../../target/{release,debug}/rein), so the .vsix
// works without rein on PATH.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, chmodSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(here, '..', '..');
const candidates = [process.env.REIN_BIN, join(repo, 'target', 'release', 'rein'), join(repo, 'target', 'debug', 'rein')].filter(Boolean);
const bin = process.env.REIN_NO_BUNDLE ? undefined : candidates.find((p) => existsSync(p));
const dest = join(here, 'bin', 'rein');
rmSync(dest, { force: true });
if (bin) {
  mkdirSync(join(here, 'bin'), { recursive: true });
  copyFileSync(bin, dest);
  chmodSync(dest, 0o755);
  console.log(`package: bundling ${bin} as bin/rein`);
} else {
  console.log('package: no rein binary found; the .vsix will use rein on PATH or rein.serverPath');
}
const { version } = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));
const out = `rein-${version}.vsix`;
const vsce = join(here, 'node_modules', '.bin', 'vsce');
execFileSync(vsce, ['package', '--no-dependencies', '--skip-license', '--allow-missing-repository', '--out', out], { cwd: here, stdio: 'inherit' });
console.log(`package: ${join(here, out)}`);
