// check.js: kprof's flame outputs in real viewers, in headless Chromium.
//
//   node check.js DIR
//
// DIR holds one capture's files (*.speedscope.json, *.svg, *.perf,
// *.folded), DIR/multi and DIR/grouped two of several processes (roots()), and
// expect.json: {"frames": [names that must show],
// "profile": "name of the first speedscope profile", "zoom": "a frame name
// to click in the SVG", "search": "a regular expression"}. Checks:
//   - speedscope (the npm package's own build, served on 127.0.0.1) loads
//     the JSON, the perf script text and the folded stacks with no page error
//     and no console warning, shows the profile's name, and lists every
//     expected frame in its Sandwich table;
//   - the SVG: clicking a frame zooms (the frame takes the full width,
//     frames outside it hide, Reset Zoom shows), hovering fills the details
//     line, search colours matches and reports a percentage, and Reset Zoom
//     puts every frame back.
// Exits non-zero with the reason on the first failure.
'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');
const { chromium } = require('playwright-core');

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const SPEEDSCOPE = path.join(__dirname, 'node_modules', 'speedscope', 'dist', 'release');

const TYPES = {
  '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css',
  '.json': 'application/json', '.svg': 'image/svg+xml', '.wasm': 'application/wasm',
  '.png': 'image/png', '.woff2': 'font/woff2', '.ico': 'image/x-icon',
};

function fail(msg) {
  console.error('check-browser: FAILED: ' + msg);
  process.exitCode = 1;
  throw new Error(msg);
}

function ok(cond, msg) {
  if (!cond) fail(msg);
  console.log('  ok: ' + msg);
}

// Speedscope's files at /, the capture's at /profiles/.
function serve(dir) {
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(req.url.split('?')[0].split('#')[0]);
    const file = url.startsWith('/profiles/')
      ? path.join(dir, path.normalize(url.slice('/profiles/'.length)).replace(/^(\.\.[/\\])+/, ''))
      : path.join(SPEEDSCOPE, url === '/' ? 'index.html' : path.normalize(url));
    fs.readFile(file, (err, data) => {
      if (err) {
        res.writeHead(404);
        res.end();
        return;
      }
      res.writeHead(200, {
        'Content-Type': TYPES[path.extname(file)] || 'text/plain',
        'Access-Control-Allow-Origin': '*',
      });
      res.end(data);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

async function speedscope(browser, base, file, expect, what) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // The importer's warnings too: a line or field it could not take fails. Not
  // Chromium's own GPU driver messages ("[.WebGL-0x...]GL Driver Message ..."),
  // which software rendering logs whatever the page draws.
  page.on('console', (m) => {
    if ((m.type() === 'warning' || m.type() === 'error') && !/^\[\.WebGL-/.test(m.text())) {
      errors.push(`console ${m.type()}: ${m.text()}`);
    }
  });
  const url = `${base}/#profileURL=${encodeURIComponent(`${base}/profiles/${file}`)}`;
  await page.goto(url);
  // The toolbar names the profile once it is imported.
  if (expect.profile) {
    await page.getByText(expect.profile, { exact: false }).first()
      .waitFor({ timeout: 20000 })
      .catch(() => fail(`${what}: speedscope did not show profile ${expect.profile}`));
    ok(true, `${what}: speedscope shows profile ${expect.profile}`);
  }
  // The Sandwich view lists every function in a DOM table.
  await page.getByText('Sandwich').first().click();
  for (const name of expect.frames) {
    await page.getByText(name, { exact: true }).first()
      .waitFor({ timeout: 10000 })
      .catch(() => fail(`${what}: speedscope's table has no ${name}`));
  }
  ok(true, `${what}: speedscope lists ${expect.frames.length} expected frames`);
  ok(errors.length === 0, `${what}: no page errors or console warnings (${errors.join('; ')})`);
  await page.close();
}

async function svg(browser, base, file, expect) {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', (d) => d.accept(expect.search));
  await page.goto(`${base}/profiles/${file}`);
  const frame = page.locator(`#frames g[data-n="${expect.zoom}"]`).first();
  ok(await frame.count() === 1, `svg: has a frame ${expect.zoom}`);
  const all = await page.locator('#frames g').count();
  const before = Number(await frame.locator('rect').getAttribute('width'));
  ok(before > 0 && before < 1100, `svg: ${expect.zoom} is ${before.toFixed(1)} px wide`);

  await frame.hover();
  const details = await page.locator('#details').textContent();
  ok(details.startsWith(expect.zoom + ' ('), `svg: hover shows "${details}"`);
  const title = await frame.locator('title').textContent();
  ok(/ \(\d+ us, [\d.]+%\)$/.test(title), `svg: tooltip "${title}"`);

  await frame.click();
  const after = Number(await frame.locator('rect').getAttribute('width'));
  ok(Math.abs(after - 1180) < 0.01, `svg: zoomed, ${expect.zoom} is now ${after} px wide`);
  const hidden = await page.locator('#frames g.hide').count();
  ok(hidden > 0, `svg: zoom hid ${hidden} of ${all} frames`);
  ok(!(await page.locator('#unzoom').getAttribute('class') || '').includes('hide'),
    'svg: Reset Zoom is shown');

  await page.locator('#search').click();
  const matched = await page.locator('#matched').textContent();
  ok(/^Matched: [\d.]+%$/.test(matched) && !matched.endsWith(' 0.00%'),
    `svg: search /${expect.search}/ says "${matched}"`);
  const coloured = await page.locator('#frames g.match').count();
  ok(coloured > 0, `svg: search coloured ${coloured} frames`);
  ok(await page.locator('#search').textContent() === 'Reset Search', 'svg: search can be reset');

  await page.locator('#unzoom').click();
  ok(await page.locator('#frames g.hide').count() === 0, 'svg: Reset Zoom shows every frame');
  const back = Number(await frame.locator('rect').getAttribute('width'));
  ok(Math.abs(back - before) < 0.01, `svg: ${expect.zoom} is back to ${back.toFixed(1)} px`);
  ok(errors.length === 0, `svg: no page errors (${errors.join('; ')})`);
  await page.close();
}

// Several processes (DIR/SUB, expect.json {"roots": {Root: us}} from the folded
// file): every root of the SVG as Chromium renders it has the folded total, and
// its frames fill it (no bare width); speedscope loads the JSON (showing the
// caller's profile by its label) and the perf script.
async function roots(browser, base, dir, sub) {
  const d = path.join(dir, sub);
  const want = JSON.parse(fs.readFileSync(path.join(d, 'expect.json'), 'utf8')).roots;
  const files = fs.readdirSync(d);
  const pick = (suffix) => `${sub}/${files.find((n) => n.endsWith(suffix))}`;
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  await page.goto(`${base}/profiles/${pick('.svg')}`);
  const got = await page.evaluate(() => {
    const out = {};
    for (const g of document.querySelectorAll('#frames g[data-d="1"]')) {
      const m = / \((\d+) us, [\d.]+%\)$/.exec(g.querySelector('title').textContent);
      const w = Number(g.querySelector('rect').getAttribute('width'));
      let kids = 0;
      const x0 = Number(g.querySelector('rect').getAttribute('x'));
      for (const k of document.querySelectorAll('#frames g[data-d="2"]')) {
        const r = k.querySelector('rect');
        const x = Number(r.getAttribute('x'));
        if (x >= x0 - 1e-3 && x < x0 + w - 1e-3) kids += Number(r.getAttribute('width'));
      }
      out[g.getAttribute('data-n')] = { us: Number(m[1]), width: w, kids };
    }
    return out;
  });
  const names = Object.keys(want);
  for (const r of names) {
    if (!got[r]) {
      ok(want[r] * 1180 < 0.2 * Object.values(want).reduce((a, b) => a + b, 0),
        `${sub} svg: ${r} is left out only as a frame under 0.1 px`);
      continue;
    }
    ok(Math.abs(got[r].us - want[r]) <= 2, `${sub} svg: ${r} ${got[r].us} us, folded ${want[r]} us`);
    ok(got[r].width - got[r].kids < 0.5, `${sub} svg: ${r} filled by its frames (` +
      `${got[r].kids.toFixed(2)} of ${got[r].width.toFixed(2)} px)`);
  }
  ok(Object.keys(got).every((r) => r in want), `${sub} svg: no root the folded file lacks`);
  await page.close();
  // The first profile is the caller's (first seen), which ran fifty/2.
  const caller = names.find((r) => !r.includes('fifty'));
  await speedscope(browser, base, pick('.speedscope.json'),
    { profile: caller, frames: ['kprof_flame_tests:fifty/2'] }, `${sub} speedscope json`);
  await speedscope(browser, base, pick('.perf'), { frames: ['kprof_flame_tests:fifty/2'] },
    `${sub} perf script`);
}

async function main() {
  const dir = path.resolve(process.argv[2] || '.');
  const expect = JSON.parse(fs.readFileSync(path.join(dir, 'expect.json'), 'utf8'));
  const files = fs.readdirSync(dir);
  const pick = (suffix) => {
    const f = files.find((n) => n.endsWith(suffix));
    if (!f) fail(`no *${suffix} in ${dir}`);
    return f;
  };
  const server = await serve(dir);
  const base = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    console.log(`check-browser: ${dir}`);
    await speedscope(browser, base, pick('.speedscope.json'), expect, 'speedscope json');
    await speedscope(browser, base, pick('.perf'), { frames: expect.frames }, 'perf script');
    await speedscope(browser, base, pick('.folded'), { frames: expect.frames }, 'folded');
    await svg(browser, base, pick('.svg'), expect);
    for (const sub of ['multi', 'grouped']) {
      await roots(browser, base, dir, sub);
    }
    console.log('check-browser: all passed');
  } finally {
    await browser.close();
    server.close();
  }
}

main().catch((e) => {
  if (!process.exitCode) {
    console.error('check-browser: FAILED: ' + (e && e.stack || e));
    process.exitCode = 1;
  }
});
