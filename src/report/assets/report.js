// The HTML report's script: draws, from the report's own JSON lines embedded in the page, one
// timeline per session, and filters them. It analyzes nothing: every mark is a field of a
// line. Text goes into the page through textContent and attributes only, never as markup.
(function () {
  'use strict';
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const cfg = JSON.parse(document.getElementById('mra-config').textContent);
  const records = JSON.parse(document.getElementById('mra-data').textContent);
  const MAX_TICKS = cfg.max_ticks_per_lane;
  const MAX_LANES = cfg.max_lanes;
  // How a stream can end when the capture, not the server, cut it short.
  const CAPTURE_ENDS = new Set(['lost_sync', 'capture_end', 'evicted', 'abandoned']);

  // ---- time: microseconds since the epoch, from RFC 3339 with microseconds ----
  function usOf(t) {
    if (typeof t !== 'string' || t.length < 20) return null;
    const ms = Date.parse(t.slice(0, 19) + 'Z');
    if (Number.isNaN(ms)) return null;
    const frac = (t.slice(20).replace(/Z$/, '') + '000000').slice(0, 6);
    return ms * 1000 + Number(frac);
  }
  function fmtDelta(us) {
    const s = us / 1e6;
    if (Math.abs(s) >= 100) return s.toFixed(0) + ' s';
    if (Math.abs(s) >= 1) return s.toFixed(2) + ' s';
    return (us / 1000).toFixed(1) + ' ms';
  }

  // ---- where a frame (or HAR entry) sits in time: the times the lines give, per input ----
  const anchors = new Map();
  function anchor(input, at, time) {
    const us = usOf(time);
    if (typeof at !== 'number' || us === null) return;
    if (!anchors.has(input)) anchors.set(input, []);
    anchors.get(input).push([at, us]);
  }
  function collectAnchors(input, v) {
    if (Array.isArray(v)) { v.forEach(function (x) { collectAnchors(input, x); }); return; }
    if (!v || typeof v !== 'object') return;
    if (typeof v.frame === 'number' && typeof v.time === 'string') anchor(input, v.frame, v.time);
    for (const k in v) if (v[k] && typeof v[k] === 'object') collectAnchors(input, v[k]);
  }
  function placeOf(input, at) {
    const a = anchors.get(input);
    if (typeof at !== 'number' || !a || a.length === 0) return null;
    let lo = 0, hi = a.length - 1;
    if (at <= a[lo][0]) return a[lo][1];
    if (at >= a[hi][0]) return a[hi][1];
    while (hi - lo > 1) { const m = (lo + hi) >> 1; if (a[m][0] <= at) lo = m; else hi = m; }
    const [f0, t0] = a[lo], [f1, t1] = a[hi];
    return f1 === f0 ? t0 : t0 + (t1 - t0) * (at - f0) / (f1 - f0);
  }

  // ---- groups: one per session view; resumes and findings join the view of their session ----
  const groups = [];
  const viewsOf = new Map();
  const key = function (input, sid) { return JSON.stringify([input, sid]); };
  for (const r of records) {
    if (r.type === 'resume') {
      anchor(r.input, r.request_frame !== null && r.request_frame !== undefined ? r.request_frame : r.har_entry, r.request_time);
      anchor(r.input, r.first_event_frame, r.first_event_time);
    }
    if (r.type !== 'summary') collectAnchors(r.input, r);
  }
  anchors.forEach(function (a) { a.sort(function (x, y) { return x[0] - y[0] || x[1] - y[1]; }); });
  for (const r of records) {
    if (r.type !== 'session') continue;
    const g = newGroup(r.input, r.session_id, r);
    const k = key(r.input, r.session_id);
    if (!viewsOf.has(k)) viewsOf.set(k, []);
    viewsOf.get(k).push(g);
  }
  const loose = new Map();
  function newGroup(input, sid, view) {
    const g = { input: input, sid: sid, view: view, resumes: [], findings: [], kinds: new Set(), verdicts: new Set(), el: null, drawn: false };
    groups.push(g);
    if (view) (view.findings || []).forEach(function (f) { g.kinds.add(f.kind); });
    return g;
  }
  function sameRequest(brief, r) {
    const at = brief.request || {};
    if (r.request_frame !== null && r.request_frame !== undefined) return at.frame === r.request_frame && at.time === r.request_time;
    return at.har_entry === r.har_entry;
  }
  function groupFor(r, brief) {
    const vs = viewsOf.get(key(r.input, r.session_id)) || [];
    for (const g of vs) {
      if (!brief) return g;
      if ((g.view.resumes || []).some(function (b) { return sameRequest(b, r); })) return g;
    }
    const k = key(r.input, r.session_id);
    if (!loose.has(k)) loose.set(k, newGroup(r.input, r.session_id, null));
    return loose.get(k);
  }
  for (const r of records) {
    if (r.type === 'resume') {
      const g = groupFor(r, true);
      g.resumes.push(r);
      g.verdicts.add(r.verdict);
      (r.findings || []).forEach(function (f) { g.kinds.add(f.kind); });
    } else if (r.type === 'finding') {
      const g = groupFor(r, false);
      g.findings.push(r);
      g.kinds.add(r.kind);
    }
  }

  // ---- DOM helpers: text only through textContent ----
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function short(s, n) {
    s = String(s);
    return s.length > n ? s.slice(0, n - 1) + '…' : s;
  }

  // ---- the detail panel ----
  const detail = document.getElementById('detail');
  const detailBody = document.getElementById('detail-body');
  document.getElementById('detail-close').addEventListener('click', function () { detail.hidden = true; });
  function copy(text, button) {
    const done = function () { button.textContent = 'copied'; setTimeout(function () { button.textContent = 'copy'; }, 1200); };
    const fallback = function () {
      const t = el('textarea');
      t.value = text;
      document.body.appendChild(t);
      t.select();
      try { document.execCommand('copy'); done(); } catch (e) { button.textContent = 'select and copy by hand'; }
      t.remove();
    };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, fallback);
    else fallback();
  }
  function showDetail(d) {
    detailBody.replaceChildren();
    detailBody.appendChild(el('h2', {}, d.title));
    const dl = el('dl');
    for (const [k, v] of d.rows) {
      if (v === null || v === undefined || v === '') continue;
      dl.appendChild(el('dt', {}, k));
      dl.appendChild(el('dd', {}, String(v)));
    }
    detailBody.appendChild(dl);
    if (d.filter) {
      detailBody.appendChild(el('div', { class: 'more' }, 'Wireshark display filter'));
      const row = el('div', { class: 'filter-row' });
      row.appendChild(el('code', { class: 'display-filter' }, d.filter));
      const b = el('button', { type: 'button', class: 'copy' }, 'copy');
      b.addEventListener('click', function () { copy(d.filter, b); });
      row.appendChild(b);
      detailBody.appendChild(row);
    }
    detail.hidden = false;
  }
  function markOf(g, cls, d, tip) {
    const m = sv('g', { class: 'mark ' + cls, tabindex: 0, role: 'button', 'aria-label': tip });
    m.appendChild(sv('title', {}, tip));
    const open = function () { showDetail(d); };
    m.addEventListener('click', open);
    m.addEventListener('keydown', function (e) { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); open(); } });
    g.appendChild(m);
    return m;
  }
  function citeText(c) {
    if (!c) return null;
    if (typeof c.har_entry === 'number') return 'HAR entry ' + c.har_entry;
    return 'frame ' + c.frame + (typeof c.file === 'string' ? ' of ' + c.file : '') + (c.time ? ' at ' + c.time : '') + (typeof c.tcp_stream === 'number' ? ', tcp.stream ' + c.tcp_stream : '');
  }
  function streamFilter(s, a, b) {
    if (typeof s !== 'number' || typeof a !== 'number') return null;
    const lo = Math.min(a, typeof b === 'number' ? b : a), hi = Math.max(a, typeof b === 'number' ? b : a);
    return 'tcp.stream eq ' + s + ' && frame.number >= ' + lo + ' && frame.number <= ' + hi;
  }

  // ---- lanes of one group ----
  function lanesOf(g) {
    const input = g.input;
    const pos = function (cite) {
      if (!cite) return null;
      const t = usOf(cite.time);
      if (t !== null) return t;
      return placeOf(input, typeof cite.frame === 'number' ? cite.frame : cite.har_entry);
    };
    const resumeOfExchange = new Map();
    const lanes = [];
    const others = { kind: 'other', label: 'other requests', dots: [] };
    const exchanges = g.view ? g.view.exchanges || [] : [];
    let standalone = 0, post = 0;
    const unmatched = g.resumes.slice();
    for (const x of exchanges) {
      const rq = x.request || {};
      let rec = null;
      if (x.last_event_id !== undefined) {
        const i = unmatched.findIndex(function (r) {
          return r.last_event_id === x.last_event_id && (r.request_frame !== null && r.request_frame !== undefined ? r.request_frame === rq.frame : r.har_entry === rq.har_entry);
        });
        if (i >= 0) rec = unmatched.splice(i, 1)[0];
      }
      if (!x.stream && !rec) {
        const t = pos(x.request);
        if (t !== null) others.dots.push({ t: t, x: x });
        continue;
      }
      const lane = { x: x, rec: rec, kind: rec ? 'resume' : (x.method === 'GET' ? 'get' : 'post') };
      if (rec) lane.label = 'resume ' + short(x.last_event_id, 18);
      else if (x.method === 'GET') lane.label = 'GET stream ' + (++standalone);
      else lane.label = (x.method || '?') + ' stream ' + (++post);
      lanes.push(lane);
      resumeOfExchange.set(x, rec);
    }
    for (const r of unmatched) lanes.push({ x: null, rec: r, kind: 'resume', label: 'resume ' + short(r.last_event_id, 18) });
    for (const lane of lanes) {
      const x = lane.x, r = lane.rec, s = x && x.stream;
      lane.stream_no = x && x.request ? x.request.tcp_stream : (r ? r.tcp_stream : undefined);
      lane.t0 = x ? pos(x.request) : usOf(r.request_time);
      if (lane.t0 === null && r) lane.t0 = usOf(r.request_time);
      lane.tResp = x ? pos(x.response) : (r ? placeOf(input, r.response_frame) : null);
      lane.ticks = [];
      if (s) {
        const f = s.first_id_frame !== null && s.first_id_frame !== undefined ? placeOf(input, s.first_id_frame) : lane.tResp;
        const l = s.last_id_frame !== null && s.last_id_frame !== undefined ? placeOf(input, s.last_id_frame) : f;
        if (s.first_id !== null && s.first_id !== undefined && f !== null) lane.ticks.push({ t: f, id: s.first_id, frame: s.first_id_frame, role: 'first id' });
        if (s.last_id !== null && s.last_id !== undefined && l !== null && (s.last_id_frame !== s.first_id_frame || s.last_id !== s.first_id)) lane.ticks.push({ t: l, id: s.last_id, frame: s.last_id_frame, role: 'last id' });
        lane.events = s.events;
        lane.gaps = s.gaps;
      } else if (r) {
        const f = usOf(r.first_event_time);
        if (r.first_event_id !== null && f !== null) lane.ticks.push({ t: f, id: r.first_event_id, frame: r.first_event_frame, role: 'first id' });
        lane.events = r.stream_events;
        lane.gaps = 0;
      }
      if (r) lane.tFirst = usOf(r.first_event_time);
      lane.end = x ? x.end : (r ? r.stream_end : null);
      const ts = [lane.t0, lane.tResp, lane.tFirst].concat(lane.ticks.map(function (k) { return k.t; })).filter(function (t) { return t !== null && t !== undefined; });
      lane.t0 = ts.length ? Math.min.apply(null, ts) : null;
      lane.t1 = ts.length ? Math.max.apply(null, ts) : null;
    }
    const drawable = lanes.filter(function (l) { return l.t0 !== null; });
    // Every resume is drawn; plain streams fill the rest of the lanes allowed.
    const resumeLanes = drawable.filter(function (l) { return l.rec; });
    const plain = drawable.filter(function (l) { return !l.rec; });
    const room = Math.max(0, MAX_LANES - resumeLanes.length);
    const kept = new Set(resumeLanes.concat(plain.slice(0, room)));
    const shown = drawable.filter(function (l) { return kept.has(l); });
    return { lanes: shown, others: others, omitted: lanes.length - shown.length };
  }

  // ---- one timeline ----
  function draw(g, box) {
    const L = lanesOf(g);
    const rows = (L.others.dots.length ? [L.others] : []).concat(L.lanes);
    let tmin = Infinity, tmax = -Infinity;
    const see = function (t) { if (t !== null && t !== undefined && Number.isFinite(t)) { tmin = Math.min(tmin, t); tmax = Math.max(tmax, t); } };
    L.lanes.forEach(function (l) { see(l.t0); see(l.t1); });
    L.others.dots.forEach(function (d) { see(d.t); });
    if (g.view) { see(usOf(g.view.first_time)); see(usOf(g.view.last_time)); }
    g.resumes.forEach(function (r) {
      ((r.cursor && r.cursor.cites) || []).forEach(function (c) { see(usOf(c.time)); });
    });
    if (!Number.isFinite(tmin)) { box.appendChild(el('p', { class: 'more' }, 'nothing in this session carries a time')); return; }
    if (tmax - tmin < 1000) { tmax = tmin + 1000; }
    const LEFT = 170, RIGHT = 100, TOP = 22, LANE = 38;
    const W = Math.max(720, (box.clientWidth || 900) - 4);
    const H = TOP + rows.length * LANE + 18;
    const X = function (t) { return LEFT + (W - LEFT - RIGHT) * (t - tmin) / (tmax - tmin); };
    const svg = sv('svg', { class: 'tl', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'timeline of session ' + (g.sid || '(none)') });
    const defs = sv('defs');
    const pat = sv('pattern', { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' });
    pat.appendChild(sv('rect', { width: 6, height: 6, fill: '#fff', 'fill-opacity': 0.6 }));
    pat.appendChild(sv('line', { x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#666', 'stroke-width': 2 }));
    defs.appendChild(pat);
    cfg.verdicts.forEach(function (v) {
      const mk = sv('marker', { id: 'arrow-' + v, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
      mk.appendChild(sv('path', { d: 'M0,0 L10,5 L0,10 z', fill: 'var(--' + v + ')' }));
      defs.appendChild(mk);
    });
    svg.appendChild(defs);
    // Axis: a few times after the session's first.
    for (let i = 0; i <= 4; i++) {
      const t = tmin + (tmax - tmin) * i / 4, x = X(t);
      svg.appendChild(sv('line', { class: 'axis', x1: x, x2: x, y1: TOP - 6, y2: H - 14 }));
      svg.appendChild(sv('text', { class: 'axis-label', x: x, y: H - 3, 'text-anchor': i === 0 ? 'start' : (i === 4 ? 'end' : 'middle') }, '+' + fmtDelta(t - tmin)));
    }
    const yOf = new Map();
    rows.forEach(function (lane, i) {
      const y = TOP + i * LANE + LANE / 2;
      yOf.set(lane, y);
      svg.appendChild(sv('rect', { class: 'lane-bg', x: 0, y: y - LANE / 2 + 2, width: W, height: LANE - 4 }));
      svg.appendChild(sv('text', { class: 'lane-label', x: 4, y: y + 4 }, short(lane.label, 26)));
    });
    // Other requests: one dot each.
    L.others.dots.forEach(function (d) {
      const y = yOf.get(L.others), x = X(d.t), ex = d.x;
      const tip = (ex.method || '?') + ' ' + (ex.target || '') + ' → ' + (ex.status === null || ex.status === undefined ? 'no answer' : ex.status);
      const m = markOf(svg, 'request', { title: tip, rows: [['request', citeText(ex.request)], ['response', citeText(ex.response)], ['end', ex.end]], filter: streamFilter(ex.request && ex.request.tcp_stream, ex.request && ex.request.frame, ex.response && ex.response.frame) }, tip);
      m.appendChild(sv('circle', { class: 'hit', cx: x, cy: y, r: 7 }));
      m.appendChild(sv('circle', { cx: x, cy: y, r: 3.5, fill: '#777' }));
    });
    // Streams: a bar from request to last id, ticks for the ids, hatching where bytes are missing.
    const deliveredAt = [];
    L.lanes.forEach(function (lane) {
      const y = yOf.get(lane), x0 = X(lane.t0), x1 = Math.max(X(lane.t1), x0 + 2), ex = lane.x, s = ex && ex.stream;
      const what = lane.rec ? 'resume with Last-Event-ID ' + lane.rec.last_event_id : lane.label;
      const rows = ex ? [['request', (ex.method || '') + ' ' + (ex.target || '') + ', ' + citeText(ex.request)], ['response', (ex.status === null || ex.status === undefined ? 'none captured' : ex.status + ', ' + citeText(ex.response))], ['ended by', ex.end], ['events', s ? s.events : null], ['first id', s && s.first_id !== null ? s.first_id + (s.first_id_frame ? ' (frame ' + s.first_id_frame + ')' : '') : null], ['last id', s && s.last_id !== null ? s.last_id + (s.last_id_frame ? ' (frame ' + s.last_id_frame + ')' : '') : null], ['capture gaps', s && s.gaps ? s.gaps : null]] : [['request', lane.rec.request_method + ' ' + lane.rec.request_target + ' at ' + lane.rec.request_time]];
      const filter = ex ? streamFilter(ex.request && ex.request.tcp_stream, ex.request && ex.request.frame, s && typeof s.last_id_frame === 'number' ? s.last_id_frame : (ex.response && ex.response.frame)) : lane.rec.display_filter;
      const bar = markOf(svg, 'lane', { title: what, rows: rows, filter: filter }, what + (s ? ': ' + s.events + ' event(s)' : ''));
      bar.appendChild(sv('rect', { class: 'hit', x: x0, y: y - 6, width: x1 - x0, height: 12 }));
      bar.appendChild(sv('line', { class: 'stream', x1: x0, x2: x1, y1: y, y2: y }));
      // Events: the first and last ids where the lines give them; the others only as a count.
      let lastLabelEnd = -Infinity;
      lane.ticks.forEach(function (k) {
        const x = X(k.t);
        const tip = k.role + ' ' + k.id + (k.frame ? ', frame ' + k.frame : '');
        const tm = markOf(svg, 'tick-mark', { title: k.role + ' of ' + what, rows: [['id', k.id], ['frame', k.frame], ['time', k.frame ? 'about ' + fmtDelta(k.t - tmin) + ' after the session began (placed between the nearest frames with a time)' : null]], filter: ex ? streamFilter(lane.stream_no, k.frame, k.frame) : null }, tip);
        tm.appendChild(sv('rect', { class: 'hit', x: x - 4, y: y - 10, width: 8, height: 20 }));
        tm.appendChild(sv('line', { class: 'tick', x1: x, x2: x, y1: y - 8, y2: y + 8 }));
        const text = short(k.id, 14), w = text.length * 6.6;
        if (x - w / 2 > lastLabelEnd + 4) {
          tm.appendChild(sv('text', { class: 'idlabel', x: x, y: y - 10, 'text-anchor': 'middle' }, text));
          lastLabelEnd = x + w / 2;
        }
        if (k.frame !== null && k.frame !== undefined) deliveredAt.push({ lane: lane, frame: k.frame, stream: lane.stream_no, x: x, y: y });
      });
      const between = Math.max(0, (lane.events || 0) - lane.ticks.length);
      if (between > 0 && lane.ticks.length === 2) {
        const a = X(lane.ticks[0].t), b = X(lane.ticks[1].t);
        const n = Math.min(between, MAX_TICKS - 2);
        for (let i = 1; i <= n; i++) {
          const x = a + (b - a) * i / (n + 1);
          svg.appendChild(sv('line', { class: 'tick count', x1: x, x2: x, y1: y - 4, y2: y + 4 }));
        }
        const note = '+' + between + ' between' + (between > n ? ', ' + (between - n) + ' not drawn' : '');
        const nt = sv('text', { class: 'note', x: x1 + 4, y: y + 14 }, note);
        nt.appendChild(sv('title', {}, between + ' event(s) between the first and last id: the report keeps their count, not their times, so they are spaced evenly' + (between > n ? '; at most ' + MAX_TICKS + ' ticks are drawn per stream' : '')));
        svg.appendChild(nt);
      }
      // Capture loss, never the server's doing: hatched.
      if (lane.gaps > 0) {
        const gm = markOf(svg, 'capture-loss', { title: 'capture gap in ' + what, rows: [['gaps', lane.gaps + ' hole(s) the capture did not hold, somewhere in this stream'], ['meaning', 'bytes missing from the capture, not from the server']], filter: filter }, lane.gaps + ' capture gap(s) in this stream');
        gm.appendChild(sv('rect', { class: 'capture-gap', x: x0, y: y - 5, width: x1 - x0, height: 10 }));
      }
      if (CAPTURE_ENDS.has(lane.end)) {
        const xe = W - RIGHT + 20;
        const em = markOf(svg, 'capture-loss', { title: 'stream ended by the capture: ' + lane.end, rows: [['ended by', lane.end], ['meaning', lane.end === 'lost_sync' ? 'missing bytes broke the framing' : 'the capture (or a limit) ended before the stream did']], filter: filter }, 'capture ended this stream (' + lane.end + ')');
        em.appendChild(sv('rect', { class: 'capture-gap', x: x1, y: y - 5, width: Math.max(6, xe - x1), height: 10 }));
      }
    });
    // Resumes: from where their Last-Event-ID was delivered to their first resumed event.
    L.lanes.filter(function (l) { return l.rec; }).forEach(function (lane) {
      const r = lane.rec, v = r.verdict, y = yOf.get(lane);
      const cites = (r.cursor && r.cursor.cites) || [];
      const delivered = cites.find(function (c) { return c.role === 'last_event_id_delivered'; });
      let src = null;
      if (delivered) {
        src = deliveredAt.find(function (d) { return d.frame === delivered.frame && d.stream === delivered.tcp_stream; }) || null;
        if (!src) {
          const t = usOf(delivered.time);
          const host = L.lanes.find(function (l) { return l.stream_no === delivered.tcp_stream && l.t0 !== null && l.t0 <= t && t <= l.t1 + 1; });
          if (t !== null) src = { x: X(t), y: host ? yOf.get(host) : y };
        }
      }
      const tEnd = lane.tFirst !== null && lane.tFirst !== undefined ? lane.tFirst : (lane.tResp !== null && lane.tResp !== undefined ? lane.tResp : lane.t1);
      const xd = X(tEnd), xs = src ? src.x : X(lane.t0), ys = src ? src.y : y;
      const lost = r.lost ? 'lost ' + r.lost.from + '–' + r.lost.to + (r.lost.count !== null ? ' (' + r.lost.count + ')' : '') : null;
      const tip = v + ': Last-Event-ID ' + r.last_event_id + ', first id ' + (r.first_event_id === null ? 'none' : r.first_event_id) + (lost ? ', ' + lost : '') + (r.replay_span ? ', replayed ' + r.replay_span + ' back' : '');
      const d = {
        title: 'resume: ' + v,
        rows: [['verdict', v], ['reason', r.reason], ['session', r.session_id], ['Last-Event-ID', r.last_event_id], ['delivered', delivered ? citeText(delivered) : 'not in the capture'], ['first id', r.first_event_id], ['first id after a gap', r.first_id_after_gap], ['lost ids', lost], ['replay span', r.replay_span], ['ids resent', r.resent_ids || null], ['request', r.request_method + ' ' + r.request_target + (r.request_frame ? ', frame ' + r.request_frame : '') + (typeof r.har_entry === 'number' ? ', HAR entry ' + r.har_entry : '') + ', ' + r.request_time], ['response', r.response_status === null ? 'none captured' : r.response_status + ' ' + (r.response_content_type || '') + (r.response_frame ? ', frame ' + r.response_frame : '')], ['first event', r.first_event_frame ? 'frame ' + r.first_event_frame + ', ' + r.first_event_time : null], ['stream end', r.stream_end], ['client → server', (r.client || '?') + ' → ' + (r.server || '?')], ['tcp.stream', r.tcp_stream], ['hop', typeof r.hop === 'number' ? (r.relays ? r.hop + ': a proxy\'s copy of ' + citeText(r.relays) : r.hop + ': nearest the client') : null], ['id shape', r.id_shape], ['evidence', r.evidence ? r.evidence.detail : null], ['cursor', r.cursor ? r.cursor.status + ': ' + r.cursor.detail : null], ['findings', (r.findings || []).map(function (f) { return f.kind; }).join(', ')]],
        filter: r.display_filter || null,
      };
      const m = markOf(svg, 'resume', d, tip);
      m.setAttribute('data-verdict', v);
      const midX = (xs + xd) / 2;
      const path = src ? 'M' + xs + ',' + ys + ' C' + midX + ',' + ys + ' ' + midX + ',' + y + ' ' + xd + ',' + y : 'M' + xs + ',' + y + ' L' + xd + ',' + y;
      m.appendChild(sv('path', { class: 'hit', d: path, stroke: 'transparent', 'stroke-width': 10, fill: 'none' }));
      m.appendChild(sv('path', { class: 'arc' + (src ? '' : ' dashed'), d: path, stroke: 'var(--' + v + ')', 'marker-end': 'url(#arrow-' + v + ')' }));
      if (src) m.appendChild(sv('circle', { cx: xs, cy: ys, r: 4, fill: 'var(--' + v + ')' }));
      // Lost and replayed ids, and the capture's own loss.
      if (v === 'gap_skipped') {
        m.appendChild(sv('rect', { class: 'lost', x: xd - 36, y: y - 7, width: 34, height: 14 }));
      } else if (v === 'replayed') {
        m.appendChild(sv('rect', { class: 'replay', x: xd - 36, y: y - 7, width: 34, height: 14 }));
      } else if (v === 'capture_incomplete') {
        m.appendChild(sv('rect', { class: 'capture-gap', x: Math.min(xs, xd), y: y - 7, width: Math.max(8, Math.abs(xd - xs)), height: 14 }));
      }
      const label = v.replace('_', ' ') + (lost ? ': ' + lost : '') + (v === 'replayed' && r.replay_span ? ': ' + r.replay_span + ' back' : '');
      // Left of the arrowhead, below the lane: the count note sits right of the stream.
      const room = xd - 8 - label.length * 6.2 > LEFT;
      m.appendChild(sv('text', { class: 'vlabel', x: room ? xd - 8 : xd + 8, y: y + 15, 'text-anchor': room ? 'end' : 'start', fill: 'var(--' + v + ')' }, label));
    });
    box.appendChild(svg);
    if (L.omitted > 0) box.appendChild(el('p', { class: 'more' }, L.omitted + ' stream(s) of this session not drawn (at most ' + MAX_LANES + ' lanes; every resume is drawn)'));
    if (g.view && g.view.exchanges_omitted > 0) box.appendChild(el('p', { class: 'more' }, g.view.exchanges_omitted + ' exchange(s) left out of the session view by the report'));
  }

  // ---- a session card ----
  function card(g) {
    const c = el('article', { class: 'session', 'data-session': g.sid === null ? '' : g.sid, 'data-input': g.input });
    const sid = g.sid === null ? '(no session id)' : g.sid;
    c.appendChild(el('h3', {}, 'session ' + sid));
    const meta = [g.input];
    if (g.view) {
      meta.push(g.view.first_time + ' – ' + g.view.last_time);
      meta.push((g.view.exchanges || []).length + ' exchange(s)');
      if ((g.view.protocol_versions || []).length) meta.push('protocol ' + g.view.protocol_versions.join(', '));
    } else meta.push('no session view: drawn from its resume records');
    c.appendChild(el('div', { class: 'meta' }, meta.join(' · ')));
    const badges = el('div');
    const counts = {};
    g.resumes.forEach(function (r) { counts[r.verdict] = (counts[r.verdict] || 0) + 1; });
    cfg.verdicts.forEach(function (v) {
      if (counts[v]) badges.appendChild(el('span', { class: 'badge v-' + v }, counts[v] + ' ' + v));
    });
    g.kinds.forEach(function (k) { badges.appendChild(el('span', { class: 'badge finding' }, k)); });
    c.appendChild(badges);
    const box = el('div', { class: 'timeline' });
    c.appendChild(box);
    // Findings of no resume, and the view's own that no resume line already carries.
    const fs = g.findings;
    const all = fs.concat(g.view ? (g.view.findings || []).filter(function (f) { return !g.resumes.some(function (r) { return (r.findings || []).some(function (rf) { return rf.detail === f.detail && rf.kind === f.kind; }); }) && !fs.some(function (lf) { return lf.detail === f.detail && lf.kind === f.kind; }); }) : []);
    if (all.length) {
      const ul = el('ul', { class: 'findings' });
      all.forEach(function (f) {
        const li = el('li', {}, f.kind + ' (' + f.severity + '): ' + f.detail + ' — ' + (f.cites || []).map(citeText).join('; '));
        ul.appendChild(li);
      });
      c.appendChild(ul);
    }
    g.box = box;
    return c;
  }

  // ---- filters, pages, lazy drawing ----
  const sessionsEl = document.getElementById('sessions');
  const shownEl = document.getElementById('shown');
  const pager = document.getElementById('pager');
  const pageNo = document.getElementById('page-no');
  const search = document.getElementById('session-search');
  const findingSel = document.getElementById('finding-filter');
  const boxes = Array.from(document.querySelectorAll('input[name=verdict]'));
  let page = 0;
  let visible = [];
  const observer = 'IntersectionObserver' in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (e.isIntersecting) { observer.unobserve(e.target); drawGroup(e.target.__group); }
    });
  }, { rootMargin: '400px' }) : null;
  function drawGroup(g) {
    if (g.drawn) return;
    g.drawn = true;
    try { draw(g, g.box); } catch (err) { g.box.appendChild(el('p', { class: 'warn' }, 'this timeline could not be drawn: ' + err)); throw err; }
  }
  function matches(g) {
    const on = new Set(boxes.filter(function (b) { return b.checked; }).map(function (b) { return b.value; }));
    const byVerdict = g.resumes.length === 0 ? on.has('none') : g.resumes.some(function (r) { return on.has(r.verdict); });
    const kind = findingSel.value;
    const byFinding = !kind || g.kinds.has(kind);
    const q = search.value.trim().toLowerCase();
    const bySearch = !q || (g.sid || '').toLowerCase().includes(q);
    return byVerdict && byFinding && bySearch;
  }
  function render() {
    visible = groups.filter(matches);
    const per = visible.length > cfg.plan.per_page && cfg.plan.paged ? cfg.plan.per_page : (cfg.plan.paged ? cfg.plan.per_page : Math.max(visible.length, 1));
    const pages = Math.max(1, Math.ceil(visible.length / per));
    page = Math.min(page, pages - 1);
    const slice = visible.slice(page * per, page * per + per);
    sessionsEl.replaceChildren();
    groups.forEach(function (g) { g.drawn = false; });
    if (observer) observer.disconnect();
    slice.forEach(function (g) {
      const c = card(g);
      c.__group = g;
      sessionsEl.appendChild(c);
      if (observer) observer.observe(c); else drawGroup(g);
    });
    shownEl.textContent = 'showing ' + slice.length + ' of ' + visible.length + ' matching session group(s), ' + groups.length + ' in all';
    pager.hidden = pages <= 1;
    pageNo.textContent = 'page ' + (page + 1) + ' of ' + pages;
  }
  boxes.forEach(function (b) { b.addEventListener('change', function () { page = 0; render(); }); });
  findingSel.addEventListener('change', function () { page = 0; render(); });
  search.addEventListener('input', function () { page = 0; render(); });
  document.getElementById('prev').addEventListener('click', function () { if (page > 0) { page--; render(); window.scrollTo(0, sessionsEl.offsetTop - 80); } });
  document.getElementById('next').addEventListener('click', function () { page++; render(); window.scrollTo(0, sessionsEl.offsetTop - 80); });

  // ---- legend ----
  const legend = document.getElementById('legend');
  cfg.verdicts.forEach(function (v) {
    const s = el('span');
    s.appendChild(el('span', { class: 'swatch v-' + v }));
    s.appendChild(document.createTextNode(v));
    legend.appendChild(s);
  });
  const hatch = el('span');
  hatch.appendChild(el('span', { class: 'hatch-key' }));
  hatch.appendChild(document.createTextNode('bytes the capture lacks (capture_incomplete, lost_sync, TCP gaps): not the server\'s fault'));
  legend.appendChild(hatch);
  legend.appendChild(el('span', {}, 'arrow: from where Last-Event-ID was delivered to the first resumed event (dashed: delivery not in the capture)'));
  legend.appendChild(el('span', {}, 'dark ticks: first and last id of a stream; light ticks: the count of events between (the report keeps no time for them), at most ' + MAX_TICKS + ' per stream'));
  legend.appendChild(el('span', {}, 'click or focus a mark for its frames and Wireshark filter'));

  render();
  document.documentElement.setAttribute('data-ready', '1');
})();
