// Read-only git plumbing for step diffs. Never writes: refs, index and tree stay the server's.

import { execFile } from 'child_process';
import { parseNameStatus, NameStatus } from './model';

/** The empty tree, to diff a root checkpoint against. */
export const EMPTY_TREE = '4b825dc642cb6eb9a060e54bf8d69288fbee4904';

export function git(cwd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('git', args, { cwd, maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err) reject(new Error(`git ${args.join(' ')}: ${stderr.trim() || err.message}`));
      else resolve(stdout);
    });
  });
}

export async function repoTop(cwd: string): Promise<string | undefined> {
  try {
    return (await git(cwd, ['rev-parse', '--show-toplevel'])).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** `ref` itself, or the empty tree when it does not resolve (the parent of a root commit). */
export async function resolveOrEmpty(cwd: string, ref: string): Promise<string> {
  try {
    return (await git(cwd, ['rev-parse', '--verify', '--quiet', `${ref}^{commit}`])).trim() || EMPTY_TREE;
  } catch {
    return EMPTY_TREE;
  }
}

export async function changedFiles(cwd: string, from: string, to: string): Promise<NameStatus[]> {
  return parseNameStatus(await git(cwd, ['diff', '--name-status', '--no-renames', '-z', from, to, '--']));
}

/** A file's content at a commit, or '' when it is not there. */
export async function showFile(cwd: string, ref: string, path: string): Promise<string> {
  if (ref === EMPTY_TREE) return '';
  try {
    return await git(cwd, ['show', `${ref}:${path}`]);
  } catch {
    return '';
  }
}
