/* svg.c: a self-contained interactive flame graph (SVG with its own script).
 *
 * The bottom frame is `all`, then one frame per process, then the call
 * paths: a frame's width is its inclusive time, its children sit on it in
 * first-seen order. Frames narrower than 0.1 px are left out (their time
 * stays in their parent's width). The script: click a frame to zoom to it
 * (its ancestors stretch and fade, other frames hide), "Reset Zoom" or
 * Escape to go back, "Search" (or Ctrl-F) asks for a regular expression,
 * colours the frames whose names match and says which share of the total
 * time they cover; hovering shows the name, time and percentage below the
 * graph, and every frame has a <title> tooltip. Under the title, a line
 * says whether the times are corrected for tracing's cost. Nothing is
 * loaded from outside the file.
 */
#include <stdlib.h>

#include "ks_write.h"

#define WIDTH 1200.0
#define PAD 10.0
#define FRAME_H 16
#define TOP 52
#define BOTTOM 34
#define MIN_W 0.1
#define CHAR_W 7.0   /* monospace 12px */

typedef struct svg {
  const ks_fout *o;
  FILE *f;
  double scale;      /* px per ns */
  uint32_t max_depth;
  char name[2048];
  int height;
} svg;

static const char script[] =
  "var frames=[],details,matched,unzoombtn,searchbtn,W=1200,PAD=10,CW=7,zoomed=null;\n"
  "function init(evt){\n"
  "  details=document.getElementById('details').firstChild;\n"
  "  matched=document.getElementById('matched');\n"
  "  unzoombtn=document.getElementById('unzoom');\n"
  "  searchbtn=document.getElementById('search');\n"
  "  var gs=document.getElementById('frames').getElementsByTagName('g');\n"
  "  for(var i=0;i<gs.length;i++){var g=gs[i],r=g.getElementsByTagName('rect')[0];\n"
  "    g._r=r;g._t=g.getElementsByTagName('text')[0];g._x=+r.getAttribute('data-x');\n"
  "    g._w=+r.getAttribute('data-w');g._d=+g.getAttribute('data-d');\n"
  "    g._n=g.getAttribute('data-n');g._fill=r.getAttribute('fill');\n"
  "    g._info=g.getElementsByTagName('title')[0].textContent;frames.push(g);}\n"
  "  document.getElementById('frames').addEventListener('click',function(e){\n"
  "    var g=owner(e.target);if(g)zoom(g);});\n"
  "  document.getElementById('frames').addEventListener('mouseover',function(e){\n"
  "    var g=owner(e.target);if(g)details.nodeValue=g._info;});\n"
  "  document.getElementById('frames').addEventListener('mouseout',function(e){\n"
  "    details.nodeValue=' ';});\n"
  "  unzoombtn.addEventListener('click',unzoom);\n"
  "  searchbtn.addEventListener('click',function(){\n"
  "    if(searchbtn.classList.contains('on'))reset_search();\n"
  "    else{var t=prompt('Search for (regular expression):','');if(t)search(t);}});\n"
  "  window.addEventListener('keydown',function(e){\n"
  "    if(e.keyCode===114||((e.ctrlKey||e.metaKey)&&e.keyCode===70)){e.preventDefault();\n"
  "      var t=prompt('Search for (regular expression):','');if(t)search(t);}\n"
  "    else if(e.key==='Escape'){unzoom();reset_search();}});\n"
  "  var q=/[?&]s=([^&]*)/.exec(window.location.search);if(q)search(decodeURIComponent(q[1]));\n"
  "}\n"
  "function owner(e){while(e&&e.tagName!=='g'&&e.parentNode)e=e.parentNode;\n"
  "  return e&&e._r?e:null;}\n"
  "function label(g,w){var max=Math.floor((w-6)/CW),n=g._n;\n"
  "  g._t.textContent=max<3?'':(n.length<=max?n:n.substring(0,max-2)+'..');}\n"
  "function place(g,x,w){g._r.setAttribute('x',x.toFixed(4));\n"
  "  g._r.setAttribute('width',w.toFixed(4));g._t.setAttribute('x',(x+3).toFixed(4));label(g,w);}\n"
  "function zoom(z){var e=1e-3,s=(W-2*PAD)/z._w;zoomed=z;unzoombtn.classList.remove('hide');\n"
  "  for(var i=0;i<frames.length;i++){var g=frames[i];\n"
  "    if(g._d>=z._d&&g._x>=z._x-e&&g._x+g._w<=z._x+z._w+e){\n"
  "      g.classList.remove('hide');g.classList.remove('parent');\n"
  "      place(g,(g._x-z._x)*s+PAD,g._w*s);}\n"
  "    else if(g._d<z._d&&g._x<=z._x+e&&g._x+g._w>=z._x+z._w-e){\n"
  "      g.classList.remove('hide');g.classList.add('parent');place(g,PAD,W-2*PAD);}\n"
  "    else g.classList.add('hide');}}\n"
  "function unzoom(){zoomed=null;unzoombtn.classList.add('hide');\n"
  "  for(var i=0;i<frames.length;i++){var g=frames[i];g.classList.remove('hide');\n"
  "    g.classList.remove('parent');place(g,g._x,g._w);}}\n"
  "function search(t){var re;try{re=new RegExp(t);}catch(x){return;}var iv=[];\n"
  "  for(var i=0;i<frames.length;i++){var g=frames[i];\n"
  "    if(re.test(g._n)){g._r.setAttribute('fill','rgb(230,0,230)');g.classList.add('match');\n"
  "      iv.push([g._x,g._x+g._w]);}\n"
  "    else{g._r.setAttribute('fill',g._fill);g.classList.remove('match');}}\n"
  "  iv.sort(function(a,b){return a[0]-b[0];});var sum=0,end=-1;\n"
  "  for(var j=0;j<iv.length;j++){var a=Math.max(iv[j][0],end);\n"
  "    if(iv[j][1]>a)sum+=iv[j][1]-a;end=Math.max(end,iv[j][1]);}\n"
  "  var pct=100*sum/(W-2*PAD);matched.textContent='Matched: '+pct.toFixed(2)+'%';\n"
  "  matched.classList.remove('hide');searchbtn.classList.add('on');\n"
  "  searchbtn.textContent='Reset Search';return pct;}\n"
  "function reset_search(){for(var i=0;i<frames.length;i++){var g=frames[i];\n"
  "  g._r.setAttribute('fill',g._fill);g.classList.remove('match');}\n"
  "  matched.classList.add('hide');searchbtn.classList.remove('on');\n"
  "  searchbtn.textContent='Search';}\n";

/* A stable colour from the name: warm for functions, cool for sleep, grey for the rest. */
static void colour(uint32_t frame, const char *name, size_t n, char *out, size_t cap) {
  uint64_t h = ks_hash(name, n);
  unsigned v1 = (unsigned)(h & 0xff), v2 = (unsigned)((h >> 8) & 0xff),
           v3 = (unsigned)((h >> 16) & 0xff);

  if (frame == KS_NONE || KS_FR_KIND(frame) == KS_FR_PROC || KS_FR_KIND(frame) == KS_FR_GROUP)
    snprintf(out, cap, "rgb(%u,%u,%u)", 160 + v1 % 30, 190 + v2 % 30, 160 + v3 % 30);
  else if (frame == KS_FR(KS_FR_PSEUDO, KS_PSEUDO_SLEEP))
    snprintf(out, cap, "rgb(110,150,%u)", 210 + v3 % 40);
  else if (KS_FR_KIND(frame) == KS_FR_PSEUDO)
    snprintf(out, cap, "rgb(%u,%u,%u)", 170 + v1 % 20, 170 + v1 % 20, 170 + v1 % 20);
  else
    snprintf(out, cap, "rgb(%u,%u,%u)", 205 + v3 * 50 / 255, v1 * 230 / 255, v2 * 55 / 255);
}

static int depth_of(void *ctx, uint32_t node, uint32_t depth, uint64_t t) {
  svg *w = ctx;

  if ((double)w->o->total[node] * w->scale < MIN_W)
    return 0;
  if (depth > w->max_depth)
    w->max_depth = depth;
  return 1;
}

static void put_label(FILE *f, const char *name, size_t n, double width) {
  long max = (long)((width - 6) / CHAR_W);
  size_t chars = 0, i, cut = n;

  if (max < 3)
    return;
  /* Count UTF-8 characters, as the script does with UTF-16 units (close enough). */
  for (i = 0; i < n; i++)
    if (((unsigned char)name[i] & 0xc0) != 0x80)
      chars++;
  if (chars <= (size_t)max) {
    ks_write_put_xml(f, name, n);
    return;
  }
  for (i = 0, chars = 0; i < n; i++)
    if (((unsigned char)name[i] & 0xc0) != 0x80 && chars++ == (size_t)max - 2) {
      cut = i;
      break;
    }
  ks_write_put_xml(f, name, cut);
  fputs("..", f);
}

static int open_node(void *ctx, uint32_t node, uint32_t depth, uint64_t t) {
  svg *w = ctx;
  uint64_t total = w->o->total[node];
  double x = PAD + (double)t * w->scale, width = (double)total * w->scale;
  double y = w->height - BOTTOM - (double)(depth + 1) * FRAME_H;
  uint32_t frame = w->o->g->tree.v[node].frame;
  char fill[40];
  size_t n;

  if (width < MIN_W)
    return 0;
  if (node == 0)
    n = (size_t)snprintf(w->name, sizeof(w->name), "all");
  else
    n = ks_callpath_frame_name(w->o->g, w->o->in, frame, w->name, sizeof(w->name));
  colour(node == 0 ? KS_NONE : frame, w->name, n, fill, sizeof(fill));
  fprintf(w->f, "<g data-d=\"%u\" data-n=\"", depth);
  ks_write_put_xml(w->f, w->name, n);
  fputs("\"><title>", w->f);
  ks_write_put_xml(w->f, w->name, n);
  fprintf(w->f, " (%llu us, %.2f%%)</title><rect x=\"%.4f\" y=\"%.1f\" width=\"%.4f\" "
                "height=\"%d\" fill=\"%s\" rx=\"2\" ry=\"2\" data-x=\"%.4f\" data-w=\"%.4f\"/>"
                "<text x=\"%.4f\" y=\"%.1f\">",
          (unsigned long long)((total + 500) / 1000),
          w->o->grand ? 100.0 * (double)total / (double)w->o->grand : 0.0, x, y, width,
          FRAME_H - 1, fill, x, width, x + 3, y + 11.5);
  put_label(w->f, w->name, n, width);
  fputs("</text></g>\n", w->f);
  return ferror(w->f) ? KS_EINVAL : 1;
}

int ks_write_svg(const ks_fout *o, FILE *f) {
  svg w;
  int rc;

  memset(&w, 0, sizeof(w));
  w.o = o;
  w.f = f;
  w.scale = o->grand ? (WIDTH - 2 * PAD) / (double)o->grand : 0;
  if ((rc = ks_fwalk(o, 0, depth_of, NULL, &w)) < 0)
    return rc;
  w.height = TOP + (int)(w.max_depth + 1) * FRAME_H + BOTTOM;
  fprintf(f, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
             "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
             "onload=\"init(evt)\" xmlns=\"http://www.w3.org/2000/svg\">\n",
          (int)WIDTH, w.height, (int)WIDTH, w.height);
  fputs("<style type=\"text/css\">\n"
        "text{font-family:monospace;font-size:12px;fill:rgb(0,0,0)}\n"
        "#frames g:hover rect{stroke:black;stroke-width:0.5}\n"
        "#frames g{cursor:pointer}\n"
        "#frames text{pointer-events:none}\n"
        ".hide{display:none}\n"
        ".parent{opacity:0.5}\n"
        "#unzoom,#search{cursor:pointer}\n"
        "</style>\n<script type=\"text/ecmascript\"><![CDATA[\n", f);
  fputs(script, f);
  fputs("]]></script>\n", f);
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"rgb(248,248,240)\"/>\n",
          (int)WIDTH, w.height);
  fprintf(f, "<text id=\"title\" x=\"%.1f\" y=\"24\" text-anchor=\"middle\" "
             "style=\"font-size:17px\">kprof flame graph: capture %lld, %llu us</text>\n",
          WIDTH / 2, (long long)o->g->id, (unsigned long long)((o->grand + 500) / 1000));
  ks_callpath_correction_text(o->g, w.name, sizeof(w.name));
  fprintf(f, "<text id=\"correction\" x=\"%.1f\" y=\"42\" text-anchor=\"middle\" "
             "style=\"font-size:10px\">", WIDTH / 2);
  if (ferror(f))
    return KS_EINVAL;
  ks_write_put_xml(f, w.name, strlen(w.name));
  fputs("</text>\n", f);
  fprintf(f, "<text id=\"unzoom\" class=\"hide\" x=\"%.1f\" y=\"24\">Reset Zoom</text>\n", PAD);
  fprintf(f, "<text id=\"search\" x=\"%.1f\" y=\"24\" text-anchor=\"end\">Search</text>\n",
          WIDTH - PAD);
  fprintf(f, "<text id=\"matched\" class=\"hide\" x=\"%.1f\" y=\"%d\" "
             "text-anchor=\"end\"> </text>\n", WIDTH - PAD, w.height - 12);
  fprintf(f, "<text id=\"details\" x=\"%.1f\" y=\"%d\"> </text>\n", PAD, w.height - 12);
  fputs("<g id=\"frames\">\n", f);
  rc = ks_fwalk(o, 0, open_node, NULL, &w);
  fputs("</g>\n</svg>\n", f);
  if (rc < 0)
    return rc;
  return ferror(f) ? KS_EINVAL : KS_OK;
}
