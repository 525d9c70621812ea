// screenshot.js: PNGs of a capture's SVG and its speedscope JSON (in speedscope's
// own build), as a reader sees them, in headless Chromium.
//
//   node screenshot.js DIR OUT_PREFIX [WIDTH]
//
// Writes OUT_PREFIX-svg.png (the whole SVG) and OUT_PREFIX-speedscope.png (the
// speedscope window, Left Heavy view of the second profile: a worker's), WIDTH px
// wide (default 800). Used for
// doc/img/ (doc/flame.md, "Many processes").
'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');
const { chromium } = require('playwright-core');

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'];
const SPEEDSCOPE = path.join(__dirname, 'node_modules', 'speedscope', 'dist', 'release');
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css',
  '.json': 'application/json', '.svg': 'image/svg+xml', '.wasm': 'application/wasm',
  '.png': 'image/png', '.woff2': 'font/woff2' };

function serve(dir) {
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(req.url.split('?')[0].split('#')[0]);
    const file = url.startsWith('/profiles/') ? path.join(dir, path.basename(url))
      : path.join(SPEEDSCOPE, url === '/' ? 'index.html' : path.normalize(url));
    fs.readFile(file, (err, data) => {
      if (err) { res.writeHead(404); res.end(); return; }
      res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] || 'text/plain' });
      res.end(data);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

async function main() {
  const [dir, out, w] = process.argv.slice(2);
  const width = Number(w || 800);
  const files = fs.readdirSync(dir);
  const svg = files.find((f) => f.endsWith('.svg'));
  const json = files.find((f) => f.endsWith('.speedscope.json'));
  const server = await serve(path.resolve(dir));
  const base = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    // The SVG is 1200 px wide: shown scaled to WIDTH as an image (its labels are
    // in the file; a device scale under 1 hangs headless Chromium's screenshots).
    let ctx = await browser.newContext({ viewport: { width, height: 600 } });
    let page = await ctx.newPage();
    await page.setContent(`<body style="margin:0"><img id="g" style="display:block" width="${width}"
      src="${base}/profiles/${svg}"></body>`);
    await page.waitForFunction(() => document.getElementById('g').complete);
    await page.locator('#g').screenshot({ path: `${out}-svg.png` });
    await ctx.close();
    ctx = await browser.newContext({ viewport: { width, height: Math.round(width * 0.6) } });
    page = await ctx.newPage();
    await page.goto(`${base}/#profileURL=${encodeURIComponent(`${base}/profiles/${json}`)}`);
    await page.getByText('Left Heavy').first().waitFor({ timeout: 20000 });
    await page.getByText('Left Heavy').first().click();
    // The second profile: the first worker's (one root per process) or the
    // workers' group; the first is the caller's.
    await page.keyboard.press('n');
    await page.waitForTimeout(1500);
    await page.screenshot({ path: `${out}-speedscope.png` });
    await ctx.close();
  } finally {
    await browser.close();
    server.close();
  }
}

main().catch((e) => { console.error(e); process.exitCode = 1; });
