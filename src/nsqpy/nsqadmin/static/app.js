// nsqadmin: a single page app over nsqadmin's JSON API. Hand-written, no framework, no build.
//
// Every value that goes into HTML passes through the `html` tag, which escapes it (topic and
// channel names come from users); only the output of another `html` call is inserted as is.
// Pages re-render on the sample interval and the new markup is patched into the old DOM, so the
// numbers change in place without flicker and typed form input survives a refresh.
'use strict';

(() => {
  const CONFIG = readConfig();
  const BASE = withSlash(CONFIG.base_path || document.body.dataset.base || '/');
  const INTERVAL_MS = Math.max(0.5, Number(CONFIG.sample_interval) || 2) * 1000;
  const IS_ADMIN = CONFIG.is_admin === true;
  const LOOKUPDS = Array.isArray(CONFIG.nsqlookupd) ? CONFIG.nsqlookupd : [];
  const SPARK_POINTS = 60; // topics list: the sparkline's samples (one request for all topics)

  function readConfig() {
    const el = document.getElementById('nsqadmin-config');
    try {
      const cfg = JSON.parse(el ? el.textContent : '{}');
      return cfg && typeof cfg === 'object' ? cfg : {};
    } catch (_err) {
      return {}; // the placeholder was not replaced: run with defaults, no admin buttons
    }
  }

  function withSlash(path) {
    const p = path.startsWith('/') ? path : '/' + path;
    return p.endsWith('/') ? p : p + '/';
  }

  // ---------------------------------------------------------------- escaping and formatting
  class Safe {
    constructor(text) { this.text = text; }
    toString() { return this.text; }
  }

  const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  const esc = (value) => String(value).replace(/[&<>"']/g, (c) => ESCAPES[c]);

  function piece(value) {
    if (value instanceof Safe) return value.text;
    if (Array.isArray(value)) return value.map(piece).join('');
    if (value === null || value === undefined || value === false) return '';
    return esc(value);
  }

  function html(strings, ...values) {
    let out = strings[0];
    for (let i = 0; i < values.length; i++) out += piece(values[i]) + strings[i + 1];
    return new Safe(out);
  }

  // A path segment; ':' stays readable in node addresses (host:port).
  const seg = (name) => encodeURIComponent(name).replace(/%3A/gi, ':');
  const link = (path) => BASE + path;
  const topicPath = (t) => 'topics/' + seg(t);
  const channelPath = (t, c) => 'topics/' + seg(t) + '/' + seg(c);
  const nodePath = (n) => 'nodes/' + seg(n);

  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  const num = (v) => (isNum(v) ? Math.round(v).toLocaleString('en-US') : '–');

  function rate(v) {
    if (!isNum(v)) return '–';
    if (v >= 100) return Math.round(v).toLocaleString('en-US') + '/s';
    return (Math.round(v * 10) / 10).toLocaleString('en-US') + '/s';
  }

  function compact(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return +(v / 1e9).toFixed(1) + 'G';
    if (a >= 1e6) return +(v / 1e6).toFixed(1) + 'M';
    if (a >= 1e3) return +(v / 1e3).toFixed(1) + 'k';
    return String(+v.toFixed(a < 10 ? 1 : 0));
  }

  function nanos(ns) { // an e2e latency (nanoseconds) the way NSQ's UI prints them
    if (!isNum(ns)) return '–';
    if (ns >= 1e9) return +(ns / 1e9).toFixed(2) + 's';
    if (ns >= 1e6) return +(ns / 1e6).toFixed(2) + 'ms';
    if (ns >= 1e3) return +(ns / 1e3).toFixed(2) + 'µs';
    return Math.round(ns) + 'ns';
  }

  function duration(seconds) { // a connection's age: 3d4h, 2h5m, 4m12s, 9s
    if (!isNum(seconds) || seconds < 0) return '–';
    let s = Math.floor(seconds);
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) return `${d}d${h}h`;
    if (h) return `${h}h${m}m`;
    if (m) return `${m}m${s}s`;
    return `${s}s`;
  }

  const spanText = (s) => (s >= 60 && s % 60 === 0 ? `${s / 60} min` : duration(s));

  function quantileLabel(q) {
    const p = +(q * 100).toFixed(4);
    return 'p' + p;
  }

  const safeUrl = (u) => (typeof u === 'string' && /^https?:\/\//i.test(u) ? u : '');

  // ---------------------------------------------------------------- API
  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(method, path, body) {
    const init = { method, headers: { Accept: 'application/json' } };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers['Content-Type'] = 'application/json';
    }
    let resp;
    try {
      resp = await fetch(BASE + 'api/' + path, init);
    } catch (err) {
      throw new ApiError(0, 'nsqadmin unreachable (' + err.message + ')');
    }
    const text = await resp.text();
    let data;
    try {
      data = text ? JSON.parse(text) : {};
    } catch (_err) {
      data = { message: text.trim() };
    }
    if (!resp.ok) {
      const msg = (data && data.message) || resp.statusText || 'HTTP ' + resp.status;
      throw new ApiError(resp.status, msg);
    }
    return data || {};
  }

  const query = (params) => Object.entries(params)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => k + '=' + encodeURIComponent(v)).join('&');

  const fetchHistory = (params) => api('GET', 'history?' + query(params)).then(smoothRates, () => null);

  // With a sub-second sample interval one sample's rate is mostly noise (a publish lands in
  // this sample or the next), so rates are taken over at least RATE_WINDOW seconds of samples.
  const RATE_WINDOW = 1;

  // The same smoothing for a bare list of per-sample rates (evenly spaced by the interval):
  // the mean over the last RATE_WINDOW seconds, restarting after a null.
  function smoothList(rates, interval) {
    const k = interval > 0 && interval < RATE_WINDOW ? Math.round(RATE_WINDOW / interval) : 1;
    if (k <= 1) return rates;
    let from = 0;
    return rates.map((r, i) => {
      if (!isNum(r)) {
        from = i + 1;
        return null;
      }
      const lo = Math.max(from, i - k + 1);
      let sum = 0;
      for (let j = lo; j <= i; j++) sum += rates[j];
      return sum / (i - lo + 1);
    });
  }

  function smoothRates(hist) {
    const pts = hist && Array.isArray(hist.points) ? hist.points : [];
    if (!(Number(CONFIG.sample_interval) < RATE_WINDOW)) return hist;
    let from = 0; // the window's first sample; a null rate (start, counter reset) restarts it
    pts.forEach((p, i) => {
      if (!isNum(p.rate)) {
        from = i;
        return;
      }
      while (from < i - 1 && p.ts - pts[from + 1].ts >= RATE_WINDOW) from += 1;
      const q = pts[from];
      if (from < i && p.ts > q.ts && isNum(p.message_count) && isNum(q.message_count)) {
        p.rate = (p.message_count - q.message_count) / (p.ts - q.ts);
      }
    });
    return hist;
  }

  // ---------------------------------------------------------------- DOM patching
  // Bring `el`'s children in line with `markup`, touching only what changed. Elements marked
  // data-own="1" keep their children (an animation writes them); data-key forces replacement.
  function patch(el, markup) {
    if (el._markup === markup) return;
    el._markup = markup;
    const tpl = document.createElement('template');
    tpl.innerHTML = markup;
    patchChildren(el, tpl.content);
  }

  function sameKind(a, b) {
    if (a.nodeType !== b.nodeType || a.nodeName !== b.nodeName) return false;
    return a.nodeType !== 1 || a.getAttribute('data-key') === b.getAttribute('data-key');
  }

  function patchChildren(cur, next) {
    const olds = Array.from(cur.childNodes);
    const news = Array.from(next.childNodes);
    news.forEach((n, i) => {
      const o = olds[i];
      if (!o) {
        cur.appendChild(n);
      } else if (!sameKind(o, n)) {
        cur.replaceChild(n, o);
      } else if (o.nodeType === 1) {
        patchAttributes(o, n);
        if (o.getAttribute('data-own') !== '1') patchChildren(o, n);
      } else if (o.nodeValue !== n.nodeValue) {
        o.nodeValue = n.nodeValue;
      }
    });
    for (let i = olds.length - 1; i >= news.length; i--) cur.removeChild(olds[i]);
  }

  function patchAttributes(cur, next) {
    for (const { name } of Array.from(cur.attributes)) {
      if (!next.hasAttribute(name)) cur.removeAttribute(name);
    }
    for (const { name, value } of Array.from(next.attributes)) {
      if (cur.getAttribute(name) !== value) cur.setAttribute(name, value);
    }
  }

  // ---------------------------------------------------------------- charts (SVG)
  const SERIES_COLORS = ['#2f7fd8', '#e07b24', '#3aa655', '#a659c9', '#d64f7a', '#1fa2a6'];
  const color = (i) => SERIES_COLORS[i % SERIES_COLORS.length];
  const CHART_CHANNELS = SERIES_COLORS.length - 1; // topic page: channels drawn next to the topic

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function clock(ts) {
    const d = new Date(ts * 1000);
    return d.toTimeString().slice(0, 8);
  }

  // Line segments of one series; a null (the first point, a counter reset) breaks the line.
  function segments(points, key, x, y) {
    const segs = [];
    let cur = [];
    for (const p of points) {
      if (isNum(p[key])) {
        cur.push([x(p.ts), y(p[key])]);
      } else if (cur.length) {
        segs.push(cur);
        cur = [];
      }
    }
    if (cur.length) segs.push(cur);
    return segs;
  }

  const fixed = (n) => n.toFixed(1);
  const pathOf = (seg) => seg.map(([px, py], i) => (i ? 'L' : 'M') + fixed(px) + ' ' + fixed(py)).join('');

  // series: [{label, key, points}] (each its own samples); format: value -> legend text.
  function chart(id, title, series, format) {
    const all = series.map((s) => ({ ...s, pts: (s.points || []).filter((p) => isNum(p.ts)) }));
    const values = [];
    const stamps = [];
    for (const s of all) {
      for (const p of s.pts) {
        if (isNum(p[s.key])) { values.push(p[s.key]); stamps.push(p.ts); }
      }
    }
    const head = html`<figcaption><span class="chart-title">${title}</span>${all.map((s, i) => {
      const last = [...s.pts].reverse().find((p) => isNum(p[s.key]));
      return html` <span class="legend" style="--c:${color(i)}">${s.label} <b>${last ? format(last[s.key]) : '–'}</b></span>`;
    })}</figcaption>`;
    if (!values.length) {
      return html`<figure class="chart" id="${id}">${head}<div class="chart-empty" data-points="0">Waiting for samples (every ${INTERVAL_MS / 1000}s)…</div></figure>`;
    }
    const W = 640, H = 190, L = 52, R = 14, T = 10, B = 24;
    const t1 = Math.max(...stamps);
    const t0 = Math.min(Math.min(...stamps), t1 - (INTERVAL_MS / 1000) * 10);
    const top = niceMax(Math.max(...values));
    const x = (ts) => L + ((ts - t0) / (t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    const grid = [0, 0.5, 1].map((f) => html`<line class="gridline" x1="${L}" x2="${W - R}" y1="${fixed(y(top * f))}" y2="${fixed(y(top * f))}"/><text class="axis" x="${L - 6}" y="${fixed(y(top * f) + 4)}" text-anchor="end">${compact(top * f)}</text>`);
    const base = fixed(y(0));
    const lines = all.map((s, i) => {
      const segs = segments(s.pts, s.key, x, y);
      if (!segs.length) return '';
      const area = segs.map((sg) => `M${fixed(sg[0][0])} ${base}` + pathOf(sg).replace(/^M/, 'L') + `L${fixed(sg[sg.length - 1][0])} ${base}Z`).join('');
      const lastSeg = segs[segs.length - 1];
      const [lx, ly] = lastSeg[lastSeg.length - 1];
      return html`${all.length === 1 ? html`<path class="area" d="${area}" fill="${color(i)}"/>` : ''}<path class="line" data-series="${s.label}" d="${segs.map(pathOf).join('')}" stroke="${color(i)}"/><circle cx="${fixed(lx)}" cy="${fixed(ly)}" r="3" fill="${color(i)}"/>`;
    });
    const count = Math.max(...all.map((s) => s.pts.filter((p) => isNum(p[s.key])).length));
    return html`<figure class="chart" id="${id}">${head}<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${title}" data-points="${count}">${grid}${lines}<text class="axis" x="${L}" y="${H - 6}">${clock(t0)}</text><text class="axis" x="${W - R}" y="${H - 6}" text-anchor="end">${clock(t1)}</text></svg></figure>`;
  }

  // A sparkline of evenly spaced rates (nulls break the line), the newest at the right edge, so
  // every row of the topics list shares one time axis however young its topic.
  function sparkRates(rates) {
    const slots = Math.max(SPARK_POINTS, rates.length);
    return sparkline(rates.map((rate, i) => ({ ts: slots - rates.length + i, rate })), [0, slots - 1]);
  }

  // domain: [t0, t1] of the x axis (default: the points' own first and last ts)
  function sparkline(points, domain) {
    const pts = (points || []).filter((p) => isNum(p.ts));
    const vals = pts.map((p) => p.rate).filter(isNum);
    if (vals.length < 2) return html`<span class="spark-empty">…</span>`;
    const W = 120, H = 22;
    const [t0, t1] = domain || [pts[0].ts, pts[pts.length - 1].ts || pts[0].ts + 1];
    const top = Math.max(...vals) || 1;
    const segs = segments(pts, 'rate', (ts) => ((ts - t0) / Math.max(t1 - t0, 1e-9)) * W, (v) => 1 + (1 - v / top) * (H - 2));
    return html`<svg class="spark" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" data-points="${vals.length}" aria-hidden="true"><path d="${segs.map(pathOf).join('')}"/></svg>`;
  }

  const pointsOf = (hist) => (hist && Array.isArray(hist.points) ? hist.points : []);

  // ---------------------------------------------------------------- shared fragments
  const notice = (title, text) => html`<div class="notice"><strong>${title}</strong> ${text}</div>`;
  const paused = (on) => (on ? html` <span class="tag tag-paused">paused</span>` : '');

  function button(action, label, kind, data, tip) {
    if (!IS_ADMIN) return '';
    const attrs = Object.entries(data).map(([k, v]) => html` data-${k}="${v}"`);
    const title = tip ? html` title="${tip}" aria-label="${tip}"` : '';
    return html`<button type="button" class="btn btn-${kind}" data-action="${action}"${attrs}${title}>${label}</button>`;
  }

  function crumbs(parts) {
    return html`<nav class="crumbs">${parts.map(([label, path]) => (path !== null
      ? html`<a href="${link(path)}">${label}</a><span class="sep">/</span>`
      : html`<span class="here">${label}</span>`))}</nav>`;
  }

  function percentiles(e2e) {
    return e2e && Array.isArray(e2e.percentiles) ? e2e.percentiles : [];
  }

  function e2eHead(quantiles, span) {
    if (!quantiles.length) return { top: '', cols: '' };
    return {
      top: html`<tr class="group"><th colspan="${span}"></th><th colspan="${quantiles.length}">E2E Processing Latency</th></tr>`,
      cols: quantiles.map((q) => html`<th class="num">${quantileLabel(q)}</th>`),
    };
  }

  function e2eCells(quantiles, e2e) {
    const mine = percentiles(e2e);
    return quantiles.map((q) => {
      const p = mine.find((x) => x.quantile === q);
      if (!p) return html`<td class="num e2e" data-quantile="${q}">–</td>`;
      const value = isNum(p.average) ? p.average : p.value;
      const tip = isNum(p.min) ? `${quantileLabel(q)}: min ${nanos(p.min)}, max ${nanos(p.max)}` : '';
      return html`<td class="num e2e" data-quantile="${q}" title="${tip}">${nanos(value)}</td>`;
    });
  }

  const quantilesOf = (e2e) => percentiles(e2e).map((p) => p.quantile);
  const clientCount = (c) => (isNum(c.client_count) ? c.client_count : (c.clients || []).length);

  function nodeLink(node, hostname) {
    return html`<a href="${link(nodePath(node))}" title="${hostname || ''}">${node}</a>`;
  }

  // ---------------------------------------------------------------- pages
  const PAGES = {};

  PAGES.topics = {
    title: () => 'Topics',
    async load() {
      const [data, recent] = await Promise.all([
        api('GET', 'topics'),
        api('GET', 'history/topics?points=' + SPARK_POINTS).catch(() => null),
      ]);
      const names = (Array.isArray(data.topics) ? data.topics : []).slice().sort();
      const all = recent && recent.topics && typeof recent.topics === 'object' ? recent.topics : {};
      const interval = recent ? Number(recent.interval) : NaN;
      const rows = names.map((name) => {
        const sum = Object.prototype.hasOwnProperty.call(all, name) ? all[name] : null;
        const rates = sum && Array.isArray(sum.rates) ? smoothList(sum.rates, interval) : [];
        return { name, sum, rates };
      });
      return { message: data.message, rows, span: isNum(interval) ? interval * SPARK_POINTS : NaN };
    },
    render(d) {
      const filter = state.filter.toLowerCase();
      const rows = d.rows.filter((r) => r.name.toLowerCase().includes(filter));
      const table = !d.rows.length ? notice('Notice', 'No Topics Found') : html`
        <table class="grid" id="topics-table">
          <thead><tr><th>Topic</th><th class="num">Depth</th><th class="num">Messages</th><th class="num">Rate</th><th>${isNum(d.span) ? 'Last ' + spanText(d.span) : 'Rate'}</th></tr></thead>
          <tbody>${rows.map((r) => {
            const s = r.sum;
            return html`<tr data-topic="${r.name}"><td><a href="${link(topicPath(r.name))}">${r.name}</a></td>
              <td class="num depth">${num(s && s.depth)}</td><td class="num messages">${num(s && s.message_count)}</td>
              <td class="num rate">${rate(r.rates[r.rates.length - 1])}</td><td>${s ? sparkRates(r.rates) : ''}</td></tr>`;
          })}</tbody>
        </table>${rows.length ? '' : notice('', 'No topic matches the filter.')}`;
      return html`<div class="page-head"><h1>Topics <small>${d.rows.length}</small></h1>
        <input type="search" class="filter" data-filter placeholder="Filter topics" aria-label="Filter topics"></div>
        ${table}`;
    },
  };

  PAGES.topic = {
    title: ([topic]) => topic,
    async load([topic]) {
      const [stats, hist, letters] = await Promise.all([
        api('GET', topicPath(topic)).catch(notFoundAs(null)),
        fetchHistory({ topic }),
        api('GET', 'dead_letter_topics').catch(() => null),
      ]);
      // the topic's own depth is ~0 once channels drain it: chart each channel's depth too
      const names = ((stats && stats.channels) || []).map((c) => c.channel_name).slice(0, CHART_CHANNELS);
      const chans = await Promise.all(names.map(async (name) => ({ name, hist: await fetchHistory({ topic, channel: name }) })));
      return { message: stats ? stats.message : '', stats, hist, chans, origins: originsOf(letters, topic) };
    },
    render(d, [topic]) {
      const s = d.stats;
      const head = html`${crumbs([['Topics', 'topics'], [topic, null]])}
        <div class="page-head"><h1><span class="kind">Topic</span> ${topic}${paused(s && s.paused)}</h1>
        <div class="actions">${s && (s.nodes || []).length ? [
          d.origins ? button('topic-redrive', 'Redrive all to their channels', 'primary', { topic }) : '',
          button(s.paused ? 'topic-unpause' : 'topic-pause', s.paused ? 'UnPause Topic' : 'Pause Topic', s.paused ? 'ok' : 'primary', { topic }),
          button('topic-empty', 'Empty Queue', 'warn', { topic }),
          button('topic-delete', 'Delete Topic', 'danger', { topic }),
        ] : ''}</div></div>${d.origins ? deadLetterNote(d.origins) : ''}`;
      const charts = html`<section class="charts">
        ${chart('chart-rate', 'Message rate', [{ label: 'published', key: 'rate', points: pointsOf(d.hist) }], rate)}
        ${chart('chart-depth', 'Depth', [{ label: 'topic', key: 'depth', points: pointsOf(d.hist) },
          ...d.chans.map((c) => ({ label: c.name, key: 'depth', points: pointsOf(c.hist) }))], num)}</section>`;
      if (!s || !(s.nodes || []).length) {
        return html`${head}${charts}<h2>Topic Message Queue</h2>
          ${notice('Notice', html`No producers exist for this topic. See <a href="${link('lookup')}">Lookup</a> for more information.`)}`;
      }
      return html`${head}${charts}${topicNodesTable(s, topic)}${channelsTable(s, topic)}`;
    },
  };

  function topicNodesTable(s, topic) {
    const qs = quantilesOf(s.e2e_processing_latency);
    const e2e = e2eHead(qs, 5);
    const rowOf = (n, total) => html`<tr class="${total ? 'total' : 'node'}" data-node="${total ? '' : n.node}">
      <td>${total ? 'Total:' : html`${button('tombstone', '✘', 'link', { topic, node: n.node }, `Tombstone ${topic} on ${n.node}`)} ${nodeLink(n.node, n.hostname)}${paused(n.paused)}`}</td>
      <td class="num depth">${num(n.depth)}</td>
      <td class="num">${num(n.memory_depth)} + ${num(n.backend_depth)}</td>
      <td class="num messages">${num(n.message_count)}</td>
      <td class="num channels">${num((Array.isArray(n.channels) ? n.channels : s.channels || []).length)}</td>
      ${e2eCells(qs, n.e2e_processing_latency)}</tr>`;
    return html`<h2>Topic Message Queue</h2>
      <table class="grid" id="topic-nodes"><thead>${e2e.top}<tr><th>NSQd Host</th><th class="num">Depth</th>
      <th class="num">Memory + Disk</th><th class="num">Messages</th><th class="num">Channels</th>${e2e.cols}</tr></thead>
      <tbody>${(s.nodes || []).map((n) => rowOf(n, false))}${rowOf(s, true)}</tbody></table>`;
  }

  function channelsTable(s, topic) {
    const chans = s.channels || [];
    if (!chans.length) {
      return html`<h2>Channel Message Queues</h2>${notice('Notice', 'No channels exist for this topic. Messages will queue at the topic until a channel is created.')}`;
    }
    const qs = quantilesOf(s.e2e_processing_latency);
    const extras = extrasOf(chans);
    const e2e = e2eHead(qs, channelSpan(extras));
    return html`<h2>Channel Message Queues</h2>
      <table class="grid" id="channels"><thead>${e2e.top}<tr>${channelCols('Channel', extras)}${e2e.cols}</tr></thead>
      <tbody>${chans.map((c) => html`<tr data-channel="${c.channel_name}">
        <td><a href="${link(channelPath(topic, c.channel_name))}">${c.channel_name}</a>${paused(c.paused)}</td>
        ${channelCells(c, extras)}${e2eCells(qs, c.e2e_processing_latency)}</tr>`)}</tbody></table>`;
  }

  // nsqpy's nsqd adds dead-letter keys to a channel only when it has a policy (or once
  // diverted a message), and lease_count only once it has had a lease, so each group of
  // columns appears only when some row carries it; a row without it (a node without the
  // feature, Go's nsqd) shows dashes.
  const reportsLetters = (rows) => (rows || []).some((c) => c && isNum(c.dead_letter_count));
  const reportsLeases = (rows) => (rows || []).some((c) => c && isNum(c.lease_count));
  const extrasOf = (rows) => ({ letters: reportsLetters(rows), leases: reportsLeases(rows) });
  const channelSpan = (x) => 9 + (x.letters ? 2 : 0) + (x.leases ? 1 : 0);

  const channelCols = (first, x) => html`<th>${first}</th><th class="num">Depth</th><th class="num">Memory + Disk</th>
    <th class="num">In-Flight</th><th class="num">Deferred</th><th class="num">Requeued</th><th class="num">Timed Out</th>
    <th class="num">Messages</th><th class="num">Connections</th>${x.letters ? html`<th class="num">Dead-lettered</th><th class="num">Expired</th>` : ''}${x.leases ? html`<th class="num" title="open leases (nsqpy)">Leases</th>` : ''}`;

  const channelCells = (c, x) => html`<td class="num depth">${num(c.depth)}</td>
    <td class="num">${num(c.memory_depth)} + ${num(c.backend_depth)}</td>
    <td class="num in-flight">${num(c.in_flight_count)}</td><td class="num">${num(c.deferred_count)}</td>
    <td class="num">${num(c.requeue_count)}</td><td class="num">${num(c.timeout_count)}</td>
    <td class="num messages">${num(c.message_count)}</td><td class="num connections">${num(clientCount(c))}</td>
    ${x.letters ? html`<td class="num dead-lettered">${num(c.dead_letter_count)}</td><td class="num expired">${num(c.expired_count)}</td>` : ''}${x.leases ? html`<td class="num leases">${num(c.lease_count)}</td>` : ''}`;

  // A topic is taken for a dead-letter topic when some channel in the cluster names it (the
  // sampler's last round, /api/dead_letter_topics) or, failing that, when its name ends in
  // nsqd's default suffix ".dead". Returns the channels naming it ([] for the name alone), or
  // null for an ordinary topic.
  function originsOf(letters, topic) {
    const all = letters && letters.topics && typeof letters.topics === 'object' ? letters.topics : {};
    const named = Object.prototype.hasOwnProperty.call(all, topic) && Array.isArray(all[topic]) ? all[topic] : [];
    return named.length || topic.endsWith('.dead') ? named : null;
  }

  function deadLetterNote(origins) {
    const list = origins.length
      ? html`of ${origins.map((o, i) => html`${i ? ', ' : ''}<a href="${link(channelPath(o.topic, o.channel))}">${o.topic}/${o.channel}</a>`)}`
      : '(by its name)';
    return html`<p class="dl-note" id="dead-letter-of"><span class="tag tag-dead">dead letters</span> Dead-letter topic ${list}.
      Redrive moves each letter back to the channel it came from.</p>`;
  }

  PAGES.channel = {
    title: ([topic, channel]) => `${topic} / ${channel}`,
    async load([topic, channel]) {
      const [stats, hist] = await Promise.all([
        api('GET', channelPath(topic, channel)).catch(notFoundAs(null)),
        fetchHistory({ topic, channel }),
      ]);
      return { message: stats ? stats.message : '', stats, hist };
    },
    render(d, [topic, channel]) {
      const s = d.stats;
      const has = s && (s.nodes || []).length;
      const head = html`${crumbs([['Topics', 'topics'], [topic, topicPath(topic)], [channel, null]])}
        <div class="page-head"><h1><span class="kind">Channel</span> ${channel}${paused(s && s.paused)}</h1>
        <div class="actions">${has ? [
          button(s.paused ? 'channel-unpause' : 'channel-pause', s.paused ? 'UnPause Channel' : 'Pause Channel', s.paused ? 'ok' : 'primary', { topic, channel }),
          button('channel-empty', 'Empty Queue', 'warn', { topic, channel }),
          button('channel-delete', 'Delete Channel', 'danger', { topic, channel }),
        ] : ''}</div></div>`;
      const points = pointsOf(d.hist);
      const charts = html`<section class="charts">
        ${chart('chart-rate', 'Message rate', [{ label: 'msgs/s', key: 'rate', points }], rate)}
        ${chart('chart-depth', 'Depth', ['depth', 'in_flight_count', 'deferred_count'].map((key) => ({ label: key.replace('_count', '').replace('_', '-'), key, points })), num)}</section>`;
      if (!has) {
        return html`${head}${charts}${notice('Notice', html`No producers exist for this topic/channel. See <a href="${link('lookup')}">Lookup</a> for more information.`)}`;
      }
      const qs = quantilesOf(s.e2e_processing_latency);
      const extras = extrasOf(s.nodes);
      const e2e = e2eHead(qs, channelSpan(extras));
      const row = (n, total) => html`<tr class="${total ? 'total' : 'node'}" data-node="${total ? '' : n.node}"><td>${total ? 'Total:' : html`${nodeLink(n.node, n.hostname)}${paused(n.paused)}`}</td>
        ${channelCells(n, extras)}${e2eCells(qs, n.e2e_processing_latency)}</tr>`;
      return html`${head}${charts}<h2>Channel Message Queues</h2>
        <table class="grid" id="channel-nodes"><thead>${e2e.top}<tr>${channelCols('NSQd Host', extras)}${e2e.cols}</tr></thead>
        <tbody>${(s.nodes || []).map((n) => row(n, false))}${row(s, true)}</tbody></table>
        ${policySection(s, topic, channel)}
        <h2>Client Connections</h2>${clientsTable(s.clients || [], true)}`;
    },
  };

  // ---------------------------------------------------------------- dead letters and TTL
  const attemptsText = (v) => (v === 0 ? 'off' : num(v));
  const ttlText = (v) => (!v || v === '0s' ? 'off' : String(v));
  const settingsOf = (c) => JSON.stringify([c.max_attempts, c.message_ttl, c.dead_letter_topic]);

  // The channel's policy (when a node reports one) and, for admins, the form that sets it.
  function policySection(s, topic, channel) {
    const has = isNum(s.dead_letter_count);
    if (!has && !IS_ADMIN) return '';
    const dlt = has ? s.dead_letter_topic : '';
    const reporting = (s.nodes || []).filter((n) => isNum(n.dead_letter_count));
    const differs = new Set(reporting.map(settingsOf)).size > 1;
    const facts = has ? html`<dl class="facts" id="policy">
        <div><dt>Max attempts</dt><dd class="max-attempts">${attemptsText(s.max_attempts)}</dd></div>
        <div><dt>Message TTL</dt><dd class="ttl">${ttlText(s.message_ttl)}</dd></div>
        <div><dt>Dead-letter topic</dt><dd class="dead-letter-topic">${dlt ? html`<a href="${link(topicPath(dlt))}">${dlt}</a>` : html`<span class="muted">none: expired messages are dropped</span>`}</dd></div>
        <div><dt>Dead-lettered</dt><dd class="dead-lettered">${num(s.dead_letter_count)}</dd></div>
        <div><dt>Expired</dt><dd class="expired">${num(s.expired_count)}</dd></div></dl>
      ${differs ? html`<div class="differs" id="policy-differs"><span class="tag tag-warn">settings differ across nodes</span> shown above: the first node's.
        <ul>${reporting.map((n) => html`<li data-node="${n.node}">${n.node}: max attempts ${attemptsText(n.max_attempts)}, TTL ${ttlText(n.message_ttl)}, dead-letter topic ${n.dead_letter_topic || 'none'}</li>`)}</ul></div>` : ''}
      ${dlt ? html`<p>${button('channel-redrive', 'Redrive dead letters', 'primary', { topic, channel, dlt })}</p>` : ''}`
      : html`<p class="muted">No dead-letter or TTL policy applies to this channel.</p>`;
    return html`<h2>Dead Letters &amp; TTL</h2><div class="columns policy"><div>${facts}</div><div>${IS_ADMIN ? policyForm(s, topic, channel) : ''}</div></div>`;
  }

  function policyForm(s, topic, channel) {
    const now = (v, text, none) => 'now ' + (v === undefined ? none : text(v)); // no keys: no policy
    return html`<form class="create" data-form="policy" data-topic="${topic}" data-channel="${channel}">
      <h2>Set Policy</h2>
      <p class="muted">Applied on every node. Empty fields stay as they are; nsqd checks the values.</p>
      <label>Max attempts <input type="text" inputmode="numeric" name="max_attempts" autocomplete="off" placeholder="0 to 65535, 0 = off (${now(s.max_attempts, attemptsText, 'off')})"></label>
      <label>Message TTL <input type="text" name="message_ttl" autocomplete="off" placeholder="e.g. 90s or 1h30m, 0s = off (${now(s.message_ttl, ttlText, 'off')})"></label>
      <label>Dead-letter topic <input type="text" name="dead_letter_topic" maxlength="64" autocomplete="off" placeholder="a topic name (${now(s.dead_letter_topic, (v) => v || 'none', 'none')})"></label>
      <button type="submit" class="btn btn-primary">Apply</button>
      ${button('channel-policy-reset', 'Reset to inherited', 'warn', { topic, channel })}</form>`;
  }

  // The form's filled-in fields as the config action's keys: a whole number goes as a number,
  // anything else as typed, so nsqd judges it and its error text reaches the user.
  function policySettings(form) {
    const settings = {};
    for (const key of ['max_attempts', 'message_ttl', 'dead_letter_topic']) {
      const value = form.elements[key].value.trim();
      if (!value) continue;
      settings[key] = key === 'max_attempts' && /^\d+$/.test(value) ? Number(value) : value;
    }
    return settings;
  }

  async function policyFromForm(form) {
    const d = { topic: form.dataset.topic, channel: form.dataset.channel };
    const settings = policySettings(form);
    const what = `the dead-letter policy of ${C(d)}`;
    const keys = Object.entries(settings).map(([k, v]) => `${k} ${JSON.stringify(v)}`);
    if (!keys.length) {
      flash(`Could not update ${what}: fill in at least one field`, true);
      return;
    }
    if (!window.confirm(`Set ${keys.join(', ')} for ${C(d)} on every node?`)) return;
    const submit = form.querySelector('button[type=submit]');
    submit.disabled = true;
    try {
      await api('POST', channelPath(d.topic, d.channel), { action: 'config', ...settings });
      flash(`Updated ${what}: ${keys.join(', ')}`, false);
      form.reset();
      await refresh();
    } catch (err) {
      flash(`Could not update ${what}: ${err.message}`, true);
    } finally {
      submit.disabled = false;
    }
  }

  function clientHost(c) {
    const host = c.hostname || c.client_id || '';
    const port = String(c.remote_address || '').split(':').pop();
    const shown = port && host ? `${host}:${port}` : host || c.remote_address || '';
    return c.client_id && c.client_id !== c.hostname && c.client_id !== host ? `${shown} (${c.client_id})` : shown;
  }

  function attributes(c) {
    const tags = [];
    if (c.sample_rate) tags.push(html`<span class="tag tag-info">Sampled ${c.sample_rate}%</span>`);
    if (c.tls) {
      const tip = [c.tls_version, c.tls_cipher_suite, c.tls_negotiated_protocol, c.tls_negotiated_protocol_is_mutual ? 'mutual' : ''].filter(Boolean).join(' ');
      tags.push(html`<span class="tag tag-tls" title="${tip}">TLS${c.tls_version ? ' ' + c.tls_version.replace(/^TLS/, '') : ''}</span>`);
    }
    if (c.deflate) tags.push(html`<span class="tag">Deflate</span>`);
    if (c.snappy) tags.push(html`<span class="tag">Snappy</span>`);
    if (c.authed) {
      const who = c.auth_identity ? `Auth: ${c.auth_identity}` : 'Authed';
      const url = safeUrl(c.auth_identity_url);
      tags.push(url ? html`<a class="tag tag-auth" href="${url}" rel="noopener noreferrer" target="_blank">${who}</a>`
        : html`<span class="tag tag-auth">${who}</span>`);
    }
    return tags;
  }

  function connectedFor(c) {
    if (isNum(c.connected)) return c.connected / 1e9; // a Go time.Duration: nanoseconds
    if (isNum(c.connect_ts) && c.connect_ts > 0) return Date.now() / 1000 - c.connect_ts;
    return NaN;
  }

  function clientsTable(clients, withNode) {
    if (!clients.length) return notice('Notice', 'No clients connected to this channel.');
    const sorted = clients.slice().sort((a, b) => clientHost(a).localeCompare(clientHost(b)));
    return html`<table class="grid" id="clients"><thead><tr><th>Client Host</th><th>User-Agent</th><th>Attributes</th>
      ${withNode ? html`<th>NSQd Host</th>` : ''}<th class="num">In-Flight</th><th class="num">Ready Count</th>
      <th class="num">Finished</th><th class="num">Requeued</th><th class="num">Messages</th><th class="num">Connected</th></tr></thead>
      <tbody>${sorted.map((c) => html`<tr class="client">
        <td title="${c.remote_address || ''}">${clientHost(c)}</td>
        <td><small>${c.user_agent || ''}</small>${c.version ? html` <small class="muted">${c.version}</small>` : ''}</td>
        <td>${attributes(c)}</td>${withNode ? html`<td>${c.node ? nodeLink(c.node, '') : ''}</td>` : ''}
        <td class="num">${num(c.in_flight_count)}</td><td class="num rdy">${num(c.ready_count)}</td>
        <td class="num">${num(c.finish_count)}</td><td class="num">${num(c.requeue_count)}</td>
        <td class="num">${num(c.message_count)}</td><td class="num">${duration(connectedFor(c))}</td></tr>`)}</tbody></table>`;
  }

  PAGES.nodes = {
    title: () => 'Nodes',
    load: () => api('GET', 'nodes'),
    render(d) {
      const nodes = Array.isArray(d.nodes) ? d.nodes : [];
      if (!nodes.length) return html`<div class="page-head"><h1>NSQd Nodes <small>0</small></h1></div>${notice('Notice', 'No nodes found.')}`;
      return html`<div class="page-head"><h1>NSQd Nodes <small>${nodes.length}</small></h1></div>
        <table class="grid" id="nodes-table"><thead><tr><th>Hostname</th><th>Broadcast Address</th><th class="num">TCP Port</th>
        <th class="num">HTTP Port</th><th>Version</th>${LOOKUPDS.length ? html`<th class="num">Lookupd Conns.</th>` : ''}<th>Topics</th></tr></thead>
        <tbody>${nodes.map((n) => {
          const id = `${n.broadcast_address}:${n.http_port}`;
          const conns = n.remote_addresses || [];
          const topics = (n.topics || []).slice().sort((a, b) => String(a.topic).localeCompare(String(b.topic)));
          return html`<tr data-node="${id}"><td>${n.hostname}</td><td><a href="${link(nodePath(id))}">${n.broadcast_address}<span class="port">:${n.http_port}</span></a></td>
            <td class="num">${n.tcp_port}</td><td class="num">${n.http_port}</td>
            <td>${n.version}${n.out_of_date ? html` <span class="tag tag-warn" title="older than the newest version in the cluster">out of date</span>` : ''}</td>
            ${LOOKUPDS.length ? html`<td class="num${conns.length !== LOOKUPDS.length ? ' flagged' : ''}" title="${conns.join(', ')}">${conns.length}</td>` : ''}
            <td class="topic-tags">${topics.map((t) => html`<a class="tag ${t.tombstoned ? 'tag-tombstoned' : 'tag-topic'}" href="${link(topicPath(t.topic))}" title="${t.tombstoned ? 'tombstoned' : ''}">${t.topic}</a>`)}</td></tr>`;
        })}</tbody></table>`;
    },
  };

  PAGES.node = {
    title: ([node]) => node,
    async load([node]) {
      // the node's totals over its topics, and over its channels (where a backlog waits once
      // a topic has channels)
      const [data, hist, chans] = await Promise.all([
        api('GET', nodePath(node)),
        fetchHistory({ node }),
        fetchHistory({ node, channel: '*' }),
      ]);
      return { ...data, hist, chans };
    },
    render(d, [node]) {
      const topics = Array.isArray(d.topics) ? d.topics : [];
      const head = html`${crumbs([['Nodes', 'nodes'], [node, null]])}
        <div class="page-head"><h1><span class="kind">Node</span> ${node}</h1>
        <div class="summary"><span><b>${num(topics.length)}</b> Topics</span><span><b>${num(d.total_messages)}</b> Messages</span>
        <span><b>${num(d.total_clients)}</b> Clients</span></div></div>`;
      const topicPts = pointsOf(d.hist);
      const chanPts = pointsOf(d.chans);
      const charts = html`<section class="charts">
        ${chart('chart-rate', 'Message rate, all topics', [{ label: 'published', key: 'rate', points: topicPts }], rate)}
        ${chart('chart-depth', 'Depth, all topics', [{ label: 'topics', key: 'depth', points: topicPts },
          { label: 'channels', key: 'depth', points: chanPts }, { label: 'in-flight', key: 'in_flight_count', points: chanPts }], num)}</section>`;
      if (!topics.length) return html`${head}${charts}${notice('Notice', 'No topics exist on this node.')}`;
      return html`${head}${charts}${topics.map((t) => html`<section class="node-topic" data-topic="${t.topic_name}">
        <h2>${button('tombstone', '✘', 'link', { topic: t.topic_name, node }, `Tombstone ${t.topic_name} on ${node}`)} <a href="${link(topicPath(t.topic_name))}">${t.topic_name}</a>${paused(t.paused)}
        <span class="h-stats">depth <b>${num(t.depth)}</b> · memory + disk <b>${num(t.memory_depth)} + ${num(t.backend_depth)}</b> · messages <b>${num(t.message_count)}</b> · channels <b>${num((t.channels || []).length)}</b></span></h2>
        ${(t.channels || []).length ? nodeChannels(t) : notice('Notice', 'No channels exist for this topic.')}</section>`)}`;
    },
  };

  function nodeChannels(t) {
    const extras = extrasOf(t.channels);
    return html`<table class="grid"><thead><tr>${channelCols('Channel', extras)}</tr></thead><tbody>
      ${t.channels.map((c) => html`<tr><td><a href="${link(channelPath(t.topic_name, c.channel_name))}">${c.channel_name}</a>${paused(c.paused)}</td>${channelCells(c, extras)}</tr>
      ${(c.clients || []).length ? html`<tr class="sub"><td colspan="${channelSpan(extras)}">${clientsTable(c.clients, false)}</td></tr>` : ''}`)}
    </tbody></table>`;
  }

  PAGES.counter = {
    title: () => 'Counter',
    async load() {
      const [data, hist] = await Promise.all([api('GET', 'counter'), fetchHistory({})]);
      const stats = Object.values(data.stats || {});
      const total = stats.reduce((sum, s) => sum + (isNum(s.message_count) ? s.message_count : 0), 0);
      const nodes = new Set(stats.map((s) => s.node));
      return { message: data.message, total, channels: stats.length, nodes: nodes.size, hist };
    },
    render(d) {
      return html`<div class="counter-page"><h1>Messages Processed</h1>
        <div class="counter" id="counter" data-own="1" data-total="${d.total}" aria-label="${num(d.total)} messages processed"></div>
        <p class="muted">across ${num(d.channels)} channels on ${num(d.nodes)} nodes · updated every ${INTERVAL_MS / 1000}s</p>
        <section class="charts wide">${chart('chart-rate', 'Publish rate, all topics', [{ label: 'msgs/s', key: 'rate', points: pointsOf(d.hist) }], rate)}</section></div>`;
    },
    after(d) { counter.to(d.total); },
  };

  // The counter rolls from the shown number to the newest total over one refresh interval.
  const counter = {
    shown: null, from: 0, target: 0, start: 0, frame: 0,
    to(total) {
      if (this.shown === null || total < this.shown) { this.shown = total; this.from = total; }
      this.from = this.shown;
      this.target = total;
      this.start = performance.now();
      if (!this.frame) this.frame = requestAnimationFrame(() => this.tick());
      this.draw();
    },
    tick() {
      this.frame = 0;
      const f = Math.min(1, (performance.now() - this.start) / INTERVAL_MS);
      this.shown = Math.round(this.from + (this.target - this.from) * f);
      this.draw();
      if (f < 1 && state.route === 'counter') this.frame = requestAnimationFrame(() => this.tick());
    },
    draw() {
      const el = document.getElementById('counter');
      if (!el) return;
      const text = Math.round(this.shown).toLocaleString('en-US');
      if (el.textContent !== text) {
        el.innerHTML = [...text].map((ch) => (ch === ',' ? '<span class="sep">,</span>' : `<span class="digit">${esc(ch)}</span>`)).join('');
      }
    },
    reset() { this.shown = null; },
  };

  PAGES.lookup = {
    title: () => 'Lookup',
    async load() {
      if (!LOOKUPDS.length) return { message: '', topics: {} };
      const data = await api('GET', 'topics?inactive=true');
      const topics = data.topics && !Array.isArray(data.topics) ? data.topics : {};
      return { message: data.message, topics };
    },
    render(d) {
      const head = html`<div class="page-head"><h1>Lookup</h1></div>`;
      if (!LOOKUPDS.length) return html`${head}${notice('Notice', 'nsqadmin is not configured with nsqlookupd hosts')}`;
      const names = Object.keys(d.topics).sort();
      const tree = names.length ? html`<p class="muted">Topics registered in nsqlookupd that no nsqd produces (inactive):</p>
        <ul class="tree" id="inactive">${names.map((t) => html`<li data-topic="${t}">${button('lookup-topic-delete', '✘', 'link', { topic: t }, `Delete topic ${t}`)}
          <a href="${link(topicPath(t))}">${t}</a>${(d.topics[t] || []).length ? html`<ul>${d.topics[t].slice().sort().map((c) => html`<li>${button('lookup-channel-delete', '✘', 'link', { topic: t, channel: c }, `Delete channel ${c}`)}
          <a href="${link(channelPath(t, c))}">${c}</a></li>`)}</ul>` : ''}</li>`)}</ul>`
        : notice('Notice', 'No inactive Topics');
      const form = IS_ADMIN ? html`<form class="create" data-form="create">
          <h2>Create Topic / Channel</h2>
          <p class="muted">Sets up a stream hierarchy in nsqlookupd before services are deployed. If <em>Channel Name</em> is empty, just the topic is created.</p>
          <label>Topic Name <input type="text" name="topic" required maxlength="64" autocomplete="off" placeholder="Topic Name"></label>
          <label>Channel Name <input type="text" name="channel" maxlength="64" autocomplete="off" placeholder="Channel Name (optional)"></label>
          <button type="submit" class="btn btn-primary">Create</button></form>` : '';
      return html`${head}<div class="columns"><div>
        <h2>nsqlookupd Hosts</h2><table class="grid narrow"><tbody>${LOOKUPDS.map((h) => html`<tr><td>${h}</td></tr>`)}</tbody></table>
        <h2>Inactive Topics</h2>${tree}</div><div>${form}</div></div>`;
    },
  };

  PAGES.missing = {
    title: () => 'Not found',
    load: async () => ({ message: '' }),
    render: () => notice('Not found', html`There is no page here. Back to <a href="${link('topics')}">Topics</a>.`),
  };

  function notFoundAs(value) {
    return (err) => {
      if (err instanceof ApiError && err.status === 404) return value;
      throw err;
    };
  }

  // ---------------------------------------------------------------- actions
  // verb/past name the action in the confirm() text and the outcome banner.
  const T = (d) => `topic "${d.topic}"`;
  const C = (d) => `channel "${d.channel}" of topic "${d.topic}"`;
  const onTopic = (action) => (d) => ({ method: 'POST', path: topicPath(d.topic), body: { action } });
  const onChannel = (action) => (d) => ({ method: 'POST', path: channelPath(d.topic, d.channel), body: { action } });
  const delTopic = (d) => ({ method: 'DELETE', path: topicPath(d.topic) });
  const delChannel = (d) => ({ method: 'DELETE', path: channelPath(d.topic, d.channel) });
  const plural = (n, one) => `${num(n)} ${one}${n === 1 ? '' : 's'}`;
  const CLEAR = { max_attempts: null, message_ttl: null, dead_letter_topic: null }; // null: inherit

  const ACTIONS = {
    'topic-pause': { verb: 'pause', past: 'Paused', what: T, req: onTopic('pause'), note: 'on every node' },
    'topic-unpause': { verb: 'unpause', past: 'Unpaused', what: T, req: onTopic('unpause') },
    'topic-empty': { verb: 'empty', past: 'Emptied', what: T, req: onTopic('empty'), note: '(its queued messages are dropped)' },
    'topic-delete': { verb: 'delete', past: 'Deleted', what: T, req: delTopic, note: 'with all its channels and messages', then: () => go(link('topics')) },
    'channel-pause': { verb: 'pause', past: 'Paused', what: C, req: onChannel('pause'), note: '(its consumers stop receiving messages)' },
    'channel-unpause': { verb: 'unpause', past: 'Unpaused', what: C, req: onChannel('unpause') },
    'channel-empty': { verb: 'empty', past: 'Emptied', what: C, req: onChannel('empty'), note: '(its queued messages are dropped)' },
    'channel-delete': { verb: 'delete', past: 'Deleted', what: C, req: delChannel, note: 'and its messages', then: (d) => go(link(topicPath(d.topic))) },
    tombstone: {
      verb: 'tombstone', past: 'Tombstoned', what: (d) => `${T(d)} on node ${d.node}`, note: '(lookupd stops listing the node for it; the node deletes the topic)',
      req: (d) => ({ method: 'DELETE', path: nodePath(d.node), body: { topic: d.topic } }),
    },
    'lookup-topic-delete': { verb: 'delete', past: 'Deleted', what: T, req: delTopic },
    'lookup-channel-delete': { verb: 'delete', past: 'Deleted', what: C, req: delChannel },
    // nsqpy's dead letters; done: the outcome banner's text from the answer
    'channel-redrive': {
      verb: 'redrive', what: (d) => `the dead letters of ${C(d)}`, note: (d) => `from dead-letter topic "${d.dlt}" back into the channel`,
      req: onChannel('redrive'), done: (d, r) => `Redrove ${plural(r.redriven, 'message')} from topic "${d.dlt}" into ${C(d)}`,
    },
    'topic-redrive': {
      verb: 'redrive', what: (d) => `every dead letter in ${T(d)}`, note: 'back to the channel it came from',
      req: onTopic('redrive'), done: (d, r) => `Redrove ${plural(r.redriven, 'message')} from ${T(d)} back to their channels`,
    },
    'channel-policy-reset': {
      verb: 'reset', past: 'Reset', what: (d) => `the dead-letter policy of ${C(d)}`, note: "to the topic's and the node's defaults",
      req: (d) => ({ method: 'POST', path: channelPath(d.topic, d.channel), body: { action: 'config', ...CLEAR } }),
    },
  };

  async function runAction(name, data, control) {
    const spec = ACTIONS[name];
    if (!spec) return;
    const what = spec.what(data);
    const note = typeof spec.note === 'function' ? spec.note(data) : spec.note;
    if (!window.confirm(`Are you sure you want to ${spec.verb} ${what}${note ? ' ' + note : ''}?`)) return;
    const { method, path, body } = spec.req(data);
    if (control) control.disabled = true;
    try {
      const answer = await api(method, path, body);
      if (spec.then) spec.then(data); else await refresh();
      flash(spec.done ? spec.done(data, answer) : `${spec.past} ${what}`, false);
    } catch (err) {
      flash(`Could not ${spec.verb} ${what}: ${err.message}`, true);
    } finally {
      if (control) control.disabled = false;
    }
  }

  async function createFromForm(form) {
    const topic = form.elements.topic.value.trim();
    const channel = form.elements.channel.value.trim();
    if (!topic) return;
    const what = channel ? `topic "${topic}" with channel "${channel}"` : `topic "${topic}"`;
    if (!window.confirm(`Create ${what} in nsqlookupd?`)) return;
    const submit = form.querySelector('button[type=submit]');
    submit.disabled = true;
    try {
      await api('POST', 'topics', channel ? { topic, channel } : { topic });
      flash(`Created ${what}`, false);
      form.reset();
      await refresh();
    } catch (err) {
      flash(`Could not create ${what}: ${err.message}`, true);
    } finally {
      submit.disabled = false;
    }
  }

  // ---------------------------------------------------------------- banners
  const banner = {
    flash: null, // {text, error}: the last action's outcome, kept until the next navigation
    loadError: '',
  };

  function flash(text, isError) {
    banner.flash = { text, error: isError };
    drawBanners();
  }

  function setBanner(id, markup) {
    const el = document.getElementById(id);
    el.hidden = !markup;
    patch(el, markup ? String(markup) : '');
  }

  function drawBanners() {
    const msg = state.data && typeof state.data.message === 'string' ? state.data.message : '';
    setBanner('warning', msg.startsWith('WARNING') ? html`<strong>Warning</strong> ${msg.replace(/^WARNING:?\s*/, '')}` : '');
    const errors = [];
    if (banner.loadError) errors.push(banner.loadError);
    if (banner.flash && banner.flash.error) errors.push(banner.flash.text);
    setBanner('error', errors.length ? html`${errors.map((e) => html`<div>${e}</div>`)}` : '');
    const ok = banner.flash && !banner.flash.error ? banner.flash.text : '';
    let okEl = document.getElementById('flash');
    if (!okEl) {
      okEl = document.createElement('div');
      okEl.id = 'flash';
      okEl.className = 'banner banner-ok';
      okEl.setAttribute('role', 'status');
      document.getElementById('banners').appendChild(okEl);
    }
    setBanner('flash', ok ? html`${ok}` : '');
    setBanner('alerts', alertsMarkup(state.alerts));
  }

  function alertsMarkup(alerts) {
    if (!alerts || !alerts.length) return '';
    const now = Date.now() / 1000;
    return html`<strong>Alerts (${alerts.length})</strong><ul>${alerts.map((a) => {
      const where = a.channel ? html`<a href="${link(channelPath(a.topic, a.channel))}">${a.topic}/${a.channel}</a>` : html`<a href="${link(topicPath(a.topic))}">${a.topic}</a>`;
      const value = a.kind === 'age' ? `${duration(a.value)} old (threshold ${duration(a.threshold)})` : `depth ${num(a.value)} (threshold ${num(a.threshold)})`;
      const since = isNum(a.since) ? ` for ${duration(now - a.since)}` : '';
      return html`<li data-kind="${a.kind}">${where} on ${nodeLink(a.node, '')}: ${value}${since}</li>`;
    })}</ul>`;
  }

  // ---------------------------------------------------------------- routing and refresh
  const ROUTES = [
    [/^(?:topics)?\/?$/, 'topics'],
    [/^topics\/([^/]+)\/?$/, 'topic'],
    [/^topics\/([^/]+)\/([^/]+)\/?$/, 'channel'],
    [/^nodes\/?$/, 'nodes'],
    [/^nodes\/([^/]+)\/?$/, 'node'],
    [/^counter\/?$/, 'counter'],
    [/^lookup\/?$/, 'lookup'],
  ];

  const state = { route: null, params: [], gen: 0, loading: -1, data: null, alerts: [], filter: '', renders: 0, again: false };

  function resolve(pathname) {
    const rel = pathname.startsWith(BASE) ? pathname.slice(BASE.length) : pathname + '/' === BASE ? '' : null;
    if (rel === null) return ['missing', []];
    for (const [re, name] of ROUTES) {
      const m = re.exec(rel);
      if (m) {
        try {
          return [name, m.slice(1).map(decodeURIComponent)];
        } catch (_err) {
          return ['missing', []];
        }
      }
    }
    return ['missing', []];
  }

  function go(url) {
    window.history.pushState(null, '', url);
    route();
    window.scrollTo(0, 0);
  }

  function route() {
    const [name, params] = resolve(location.pathname);
    state.route = name;
    state.params = params;
    state.gen += 1;
    state.data = null;
    state.filter = '';
    banner.loadError = '';
    banner.flash = null;
    counter.reset();
    const page = PAGES[name];
    document.title = `nsqadmin · ${page.title(params)}`;
    for (const a of document.querySelectorAll('#nav a')) {
      const here = a.dataset.route === name || (a.dataset.route === 'topics' && (name === 'topic' || name === 'channel'))
        || (a.dataset.route === 'nodes' && name === 'node');
      a.classList.toggle('active', here);
    }
    const main = document.getElementById('main');
    main._markup = null;
    main.innerHTML = '<p class="loading">Loading…</p>';
    drawBanners();
    refresh();
  }

  async function refresh() {
    const gen = state.gen;
    if (state.loading === gen) { // still loading: load once more afterwards (an action changed things)
      state.again = true;
      return;
    }
    state.loading = gen;
    state.again = false;
    const page = PAGES[state.route];
    try {
      const [data, alerts] = await Promise.all([page.load(state.params), api('GET', 'alerts').catch(() => null)]);
      if (gen !== state.gen) return;
      state.data = data;
      if (alerts && Array.isArray(alerts.alerts)) state.alerts = alerts.alerts;
      banner.loadError = '';
      draw();
    } catch (err) {
      if (gen !== state.gen) return;
      banner.loadError = err.message;
      if (!state.data) {
        const main = document.getElementById('main');
        main._markup = null;
        main.innerHTML = String(notice('Error', err.message));
      }
      drawBanners();
    } finally {
      if (state.loading === gen) {
        state.loading = -1;
        if (state.again) refresh();
      }
    }
  }

  function draw() {
    const page = PAGES[state.route];
    patch(document.getElementById('main'), String(page.render(state.data, state.params)));
    if (page.after) page.after(state.data);
    drawBanners();
    state.renders += 1;
    document.documentElement.dataset.renders = String(state.renders);
  }

  // Same-origin links under the base path are routed here; anything else the browser handles.
  document.addEventListener('click', (ev) => {
    const btn = ev.target.closest('button[data-action]');
    if (btn) {
      ev.preventDefault();
      runAction(btn.dataset.action, { ...btn.dataset }, btn);
      return;
    }
    const a = ev.target.closest('a[href]');
    if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    if (a.target || a.hasAttribute('download')) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || !(url.pathname + '/').startsWith(BASE)) return;
    if (url.pathname.startsWith(BASE + 'static/') || url.pathname.startsWith(BASE + 'api/')) return;
    ev.preventDefault();
    if (url.pathname !== location.pathname || url.search !== location.search) go(url.pathname + url.search);
    else refresh();
  });

  document.addEventListener('submit', (ev) => {
    const form = ev.target.closest('form[data-form]');
    if (!form) return;
    ev.preventDefault();
    if (form.dataset.form === 'policy') policyFromForm(form); else createFromForm(form);
  });

  document.addEventListener('input', (ev) => {
    if (!ev.target.matches('[data-filter]')) return;
    state.filter = ev.target.value;
    if (state.data) draw();
  });

  window.addEventListener('popstate', route);

  document.getElementById('version').textContent = CONFIG.version ? 'v' + CONFIG.version : '';
  for (const a of document.querySelectorAll('a[data-route]')) a.setAttribute('href', link(a.dataset.route === 'topics' && a.classList.contains('brand') ? '' : a.dataset.route));

  route();
  setInterval(() => {
    if (!document.hidden) refresh();
  }, INTERVAL_MS);
})();
