// Opens an HTML report in headless Chromium and checks it as a reader would see it.
//
// Run by tests/html.rs; needs Node.js (18 or later) and Chromium, nothing else: Chromium is
// driven over the DevTools protocol on a pipe (--remote-debugging-pipe), so no npm package
// and no network port are involved.
//
//   node tests/browser/report.mjs --html FILE --expect '{"verdicts":{...},"sessions":["id",...]}'
//        [--chromium /usr/bin/chromium] [--screenshot OUT.png] [--hostile]
//
// Checks: no console error or exception; the resumes drawn per verdict equal `verdicts`;
// every verdict filter shows only sessions with that verdict; the finding filter and the
// session search narrow what is shown; a resume's detail panel carries its display filter.
// With --hostile, also that no markup from the data ran. Prints what it saw as JSON; exits 1
// on the first failed check.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

function args() {
  const a = { chromium: '/usr/bin/chromium' };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i++) {
    const k = v[i].replace(/^--/, '');
    if (k === 'hostile') a.hostile = true;
    else a[k] = v[++i];
  }
  return a;
}

const opt = args();
const expect = JSON.parse(opt.expect);
const profile = mkdtempSync(join(tmpdir(), 'mra-chromium-'));
const browser = spawn(opt.chromium, [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--no-first-run', '--no-default-browser-check', '--disable-extensions',
  '--user-data-dir=' + profile, '--remote-debugging-pipe', 'about:blank',
], {
  stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
  // Its own temporary folders go inside the profile, removed with it.
  env: { ...process.env, TMPDIR: profile },
  // A process group of its own, so that its helper processes can be stopped with it.
  detached: true,
});
// Stops the browser and every helper it started, which could otherwise write into the
// profile after it was removed.
function killAll(signal) {
  try { process.kill(-browser.pid, signal); } catch (e) { /* already gone */ }
}
let stderr = '';
browser.stderr.on('data', (d) => { stderr += d; });

// The protocol: JSON messages ended by NUL, to the browser on fd 3, from it on fd 4.
const toBrowser = browser.stdio[3];
const fromBrowser = browser.stdio[4];
// The browser is stopped once the checks are over, and a read on its pipes may then fail
// (ECONNRESET): not the page's failure, and unhandled it made node exit 1 after the checks
// had passed. Before that, a broken pipe is a failure of the run.
for (const s of [browser.stderr, toBrowser, fromBrowser]) {
  s.on('error', (e) => {
    if (!finished) {
      problems.push('the pipe to the browser failed: ' + e.message);
      finish(1, {});
    }
  });
}
let nextId = 1;
const waiting = new Map();
const listeners = [];
let inbox = Buffer.alloc(0);
fromBrowser.on('data', (chunk) => {
  inbox = Buffer.concat([inbox, chunk]);
  let end;
  while ((end = inbox.indexOf(0)) >= 0) {
    const msg = JSON.parse(inbox.subarray(0, end).toString('utf8'));
    inbox = inbox.subarray(end + 1);
    if (msg.id && waiting.has(msg.id)) {
      const { ok, fail } = waiting.get(msg.id);
      waiting.delete(msg.id);
      if (msg.error) fail(new Error(JSON.stringify(msg.error))); else ok(msg.result);
    } else {
      for (const l of listeners) l(msg);
    }
  }
});
function send(method, params = {}, sessionId) {
  const id = nextId++;
  const msg = { id, method, params };
  if (sessionId) msg.sessionId = sessionId;
  return new Promise((ok, fail) => {
    waiting.set(id, { ok, fail });
    toBrowser.write(JSON.stringify(msg) + '\0');
  });
}

const problems = [];
function check(cond, what) {
  if (!cond) problems.push(what);
  return cond;
}
let finished = false;
function finish(code, seen) {
  if (finished) return;
  finished = true;
  process.stdout.write(JSON.stringify({ ok: code === 0, problems, seen }, null, 1) + '\n');
  // The profile is removed once the browser has exited: removed while it still ran, the
  // browser wrote into it again and the folder stayed behind after every run.
  // Under load the browser can take seconds to exit; its helpers are killed before the
  // profile goes, whichever way it ends.
  const done = () => {
    killAll('SIGKILL');
    try { rmSync(profile, { recursive: true, force: true }); } catch (e) { /* left for the OS */ }
    process.exit(code);
  };
  if (browser.exitCode !== null || browser.signalCode !== null) {
    done();
    return;
  }
  browser.once('exit', done);
  killAll('SIGTERM');
  setTimeout(() => killAll('SIGKILL'), 3000).unref();
  setTimeout(done, 5000);
}
const timer = setTimeout(() => {
  problems.push('timed out; chromium said: ' + stderr.slice(-2000));
  finish(1, null);
}, 90000);

try {
  const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
  const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
  const s = (m, p) => send(m, p, sessionId);
  const errors = [];
  let loaded;
  const load = new Promise((r) => { loaded = r; });
  listeners.push((msg) => {
    if (msg.sessionId !== sessionId) return;
    if (msg.method === 'Runtime.exceptionThrown') errors.push('exception: ' + JSON.stringify(msg.params.exceptionDetails).slice(0, 600));
    if (msg.method === 'Runtime.consoleAPICalled' && (msg.params.type === 'error' || msg.params.type === 'assert')) errors.push('console: ' + JSON.stringify(msg.params.args).slice(0, 600));
    if (msg.method === 'Log.entryAdded' && msg.params.entry.level === 'error') errors.push('log: ' + msg.params.entry.text);
    if (msg.method === 'Page.loadEventFired') loaded();
    if (msg.method === 'Page.javascriptDialogOpening') { errors.push('a dialog opened: ' + msg.params.message); s('Page.handleJavaScriptDialog', { accept: true }); }
  });
  await s('Runtime.enable');
  await s('Log.enable');
  await s('Page.enable');
  await s('Emulation.setDeviceMetricsOverride', { width: 1280, height: 1000, deviceScaleFactor: 1, mobile: false });
  await s('Page.navigate', { url: pathToFileURL(resolve(opt.html)).href });
  await load;
  const run = async (fn, arg) => {
    const r = await s('Runtime.evaluate', {
      expression: '(' + fn.toString() + ')(' + JSON.stringify(arg ?? null) + ')',
      awaitPromise: true, returnByValue: true,
    });
    if (r.exceptionDetails) throw new Error('in the page: ' + JSON.stringify(r.exceptionDetails).slice(0, 800));
    return r.result.value;
  };

  if (opt.pages) {
    // A paged report: the pager shows, a page holds its share, and next moves on.
    const paged = await run(async () => {
      const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      const cards = () => Array.from(document.querySelectorAll('#sessions article.session'));
      const out = { pager: !document.getElementById('pager').hidden, label: document.getElementById('page-no').textContent, cards: cards().length };
      const first = cards()[0].dataset.session;
      document.getElementById('next').click();
      await frame();
      out.after = document.getElementById('page-no').textContent;
      out.moved = cards()[0].dataset.session !== first;
      const search = document.getElementById('session-search');
      search.value = first;
      search.dispatchEvent(new Event('input'));
      out.searched = cards().length;
      out.pagerAfterSearch = !document.getElementById('pager').hidden;
      return out;
    });
    check(errors.length === 0, 'console errors: ' + errors.join(' | '));
    check(paged.pager, 'no pager');
    check(paged.label === 'page 1 of ' + opt.pages, 'pager says ' + paged.label);
    check(paged.cards === Number(opt.per_page), paged.cards + ' cards on a page');
    check(paged.after === 'page 2 of ' + opt.pages && paged.moved, 'next did not move on');
    check(paged.searched >= 1 && !paged.pagerAfterSearch, 'a search did not narrow to one page');
    clearTimeout(timer);
    finish(problems.length ? 1 : 0, paged);
  }

  // In the page: helpers that draw every card shown (they draw when scrolled to) and count.
  const seen = await run(async (want) => {
    const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    async function drawAll() {
      for (const c of document.querySelectorAll('#sessions article.session')) {
        c.scrollIntoView();
        await frame();
      }
      await frame();
      window.scrollTo(0, 0);
    }
    function drawnVerdicts() {
      const n = {};
      for (const m of document.querySelectorAll('#sessions svg g.resume')) n[m.dataset.verdict] = (n[m.dataset.verdict] || 0) + 1;
      return n;
    }
    const cards = () => Array.from(document.querySelectorAll('#sessions article.session'));
    const out = { ready: document.documentElement.dataset.ready === '1' };
    await drawAll();
    out.cards = cards().length;
    out.drawn = drawnVerdicts();
    out.svgs = document.querySelectorAll('#sessions svg.tl').length;
    out.hatched = document.querySelectorAll('#sessions .capture-gap').length;
    // One verdict at a time: only sessions with it, and all its resumes among them.
    const boxes = Array.from(document.querySelectorAll('input[name=verdict]'));
    const set = (on) => { for (const b of boxes) { b.checked = on(b.value); } boxes[0].dispatchEvent(new Event('change')); };
    out.byVerdict = {};
    for (const v of Object.keys(want.verdicts)) {
      set((x) => x === v);
      await drawAll();
      const badges = cards().map((c) => c.querySelector('.badge.v-' + v) !== null);
      out.byVerdict[v] = { cards: cards().length, allHaveIt: badges.every(Boolean), drawn: drawnVerdicts()[v] || 0 };
    }
    set(() => true);
    // The finding filter and the session search narrow the cards.
    const sel = document.getElementById('finding-filter');
    out.findingKinds = {};
    for (const o of Array.from(sel.options).filter((o) => o.value)) {
      sel.value = o.value;
      sel.dispatchEvent(new Event('change'));
      out.findingKinds[o.value] = cards().length;
    }
    sel.value = '';
    sel.dispatchEvent(new Event('change'));
    const search = document.getElementById('session-search');
    out.search = {};
    for (const id of want.sessions) {
      search.value = id;
      search.dispatchEvent(new Event('input'));
      out.search[id] = cards().map((c) => c.dataset.session);
    }
    search.value = '\u0001no such session';
    search.dispatchEvent(new Event('input'));
    out.searchNone = cards().length;
    search.value = '';
    search.dispatchEvent(new Event('input'));
    await drawAll();
    // The detail panel of the first resume drawn.
    const mark = document.querySelector('#sessions svg g.resume');
    if (mark) {
      mark.dispatchEvent(new MouseEvent('click', { bubbles: true }));
      out.detailShown = !document.getElementById('detail').hidden;
      const f = document.querySelector('#detail .display-filter');
      out.detailFilter = f ? f.textContent : null;
      out.detailCopy = document.querySelector('#detail button.copy') !== null;
      document.getElementById('detail').hidden = true;
    }
    out.pwned = window.__pwned === 1;
    out.imgs = document.querySelectorAll('img').length;
    return out;
  }, expect);

  check(seen.ready, 'the script did not finish');
  check(errors.length === 0, 'console errors: ' + errors.join(' | '));
  const total = Object.values(expect.verdicts).reduce((a, b) => a + b, 0);
  for (const [v, n] of Object.entries(expect.verdicts)) {
    check((seen.drawn[v] || 0) === n, `drawn ${v}: ${seen.drawn[v] || 0}, report says ${n}`);
    const b = seen.byVerdict[v];
    check(b.drawn === n, `filter ${v}: ${b.drawn} drawn, report says ${n}`);
    check(b.allHaveIt, `filter ${v} shows a session without that verdict`);
    if (n === 0) check(b.cards === 0, `filter ${v} shows ${b.cards} sessions for no resume`);
    else check(b.cards > 0 && b.cards <= seen.cards, `filter ${v} shows ${b.cards} of ${seen.cards}`);
  }
  const drawnTotal = Object.values(seen.drawn).reduce((a, b) => a + b, 0);
  check(drawnTotal === total, `drawn ${drawnTotal} resumes, report says ${total}`);
  for (const [k, n] of Object.entries(seen.findingKinds)) check(n > 0 && n <= seen.cards, `finding filter ${k} shows ${n}`);
  for (const [id, shown] of Object.entries(seen.search)) check(shown.length > 0 && shown.every((x) => x.includes(id)), `search ${id} shows ${JSON.stringify(shown)}`);
  check(seen.searchNone === 0, 'a search for no session still shows cards');
  if (total > 0) {
    check(seen.detailShown, 'the detail panel did not open');
    check(typeof seen.detailFilter === 'string' && seen.detailFilter.startsWith('tcp.stream eq ') || expect.har, 'no display filter in the detail panel');
    check(seen.detailCopy || expect.har, 'no copy button');
  }
  if (opt.hostile) {
    check(!seen.pwned, 'markup from the data ran');
    check(seen.imgs === 0, 'markup from the data made an element');
  }
  if (opt.screenshot) {
    await s('Emulation.setDeviceMetricsOverride', { width: 1280, height: Number(opt.height || 1400), deviceScaleFactor: 1, mobile: false });
    await run(async () => { window.scrollTo(0, 0); await new Promise((r) => setTimeout(r, 200)); });
    const shot = await s('Page.captureScreenshot', { format: 'png' });
    writeFileSync(opt.screenshot, Buffer.from(shot.data, 'base64'));
  }
  clearTimeout(timer);
  finish(problems.length ? 1 : 0, seen);
} catch (e) {
  problems.push(String(e && e.stack || e));
  clearTimeout(timer);
  finish(1, null);
}
