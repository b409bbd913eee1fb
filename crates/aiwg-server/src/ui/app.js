// The aiwg-serve dashboard: a client of the public operator API and of nothing else.
//
// Three rules hold everywhere in this file:
// - Every value that comes from the server (objectives, progress, prompts, ids) is put on the page as
//   text, through `h` below, never as markup: an objective holding `<script>` shows as those characters.
// - The operator's token lives in sessionStorage (this tab's session only) and travels in the
//   Authorization header (to the event socket, which can carry no such header, as a subprotocol): never
//   in a URL, so it never reaches a log line or a Referer.
// - The pages learn about changes from the operator event stream, `/ws/events` (a WebSocket: a stream
//   read with fetch would hold one of the six connections a browser opens to a host, per tab), resumed
//   after a drop from the last sequence seen, so no event is lost and none is shown twice. The stream
//   says *that* something changed; the REST reads say what it is now.

const TOKEN_KEY = 'aiwg-serve.operator-token';
const STATES = ['queued', 'assigned', 'running', 'paused', 'hitl-required', 'suspended', 'done', 'failed', 'aborted'];
// A mark for each state beside its name, so states differ without colour.
const MARKS = {
  queued: '…', assigned: '→', running: '▶', paused: '‖', 'hitl-required': '?', suspended: '◌',
  done: '✓', failed: '✗', aborted: '■',
};
// How often a page re-reads what an event changed, at most: "within a second", without a read per event
// under a flood of progress events.
const REFRESH_MS = 250;
const FLEET_POLL_MS = 3000;
// A mission's timeline holds this many events, or this much event data, at most; it is read in pages of
// at most TIMELINE_PAGE_BYTES (an executor's events can be 1 MiB each), and one event shows at most
// EVENT_SHOWN characters of its data.
const TIMELINE_MAX = 10000;
const TIMELINE_BYTES = 16 * 1024 * 1024;
const TIMELINE_PAGE_BYTES = 1024 * 1024;
const EVENT_SHOWN = 16 * 1024;
const EVENTS_KEPT = 500;
// A mission's log shows its last LOG_LINES lines (the download has all of it).
const LOG_LINES = 5000;

const view = document.getElementById('view');
const overviewEl = document.getElementById('overview');
const liveEl = document.getElementById('live');
const signOutButton = document.getElementById('sign-out');
const notifyButton = document.getElementById('notify');
const inboxCount = document.getElementById('inbox-count');
const whoEl = document.getElementById('whoami');

// ---------------------------------------------------------------------------------------------------
// DOM: elements from data, text only.

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  return fill(el, ...children);
}

// Replaces an element's content; absent values (undefined, null, false) are left out, the rest is text.
function fill(el, ...children) {
  el.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

function badge(state) {
  return h('span', { class: `state state-${state}`, 'data-state': state }, `${MARKS[state] || '·'} ${state}`);
}

function missionLink(id) {
  return h('a', { href: `#/missions/${encodeURIComponent(id)}` }, id);
}

// The reader's local date and time, as toLocaleString() says it, from one formatter made once: each
// toLocaleString() call builds a formatter of its own, which the events page paid for every row it drew
// under a stream.
const LOCAL_TIME = new Intl.DateTimeFormat(undefined, {
  year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric',
});

function local(d) {
  return LOCAL_TIME.format(d);
}

function time(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? ts : h('time', { datetime: ts, title: ts }, local(d));
}

// How long a running mission has been silent (its updated_at is when it was last heard of), as "42 s",
// "7 min", "3 h"; '' for a mission that does not run. Said by the reader's clock: serve does not send it.
function silence(m) {
  if (m.state !== 'running') return '';
  const s = Math.max(0, Math.round((Date.now() - Date.parse(m.updated_at)) / 1000));
  if (Number.isNaN(s)) return '';
  return s < 120 ? `${s} s` : s < 7200 ? `${Math.round(s / 60)} min` : `${Math.round(s / 3600)} h`;
}

function timeouts(t) {
  if (!t) return '';
  const names = { schedule_to_start_s: 'schedule-to-start', start_to_close_s: 'start-to-close', heartbeat_s: 'heartbeat' };
  return Object.entries(names).filter(([k]) => t[k] !== undefined).map(([k, n]) => `${n} ${t[k]} s`).join(', ');
}

// A retried mission's attempts, one line each: number, executor (by name, its id on hover), how it ended.
function attempts(list) {
  if (!list || list.length < 2) return '';
  return h('ol', { class: 'attempts' }, list.map((a) => h(
    'li',
    { 'data-attempt': String(a.attempt) },
    a.executor_id ? h('span', { title: a.executor_id }, executorNames.get(a.executor_id) || shortId(a.executor_id)) : 'no executor yet',
    `: ${a.reason || 'under way'}`,
    a.retry_at ? ` (next attempt at ${local(new Date(a.retry_at))})` : '',
  )));
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

// An item whose data is large keeps only the part shown of it: the Events page holds hundreds.
function slim(item) {
  const text = JSON.stringify(item.envelope.data ?? null);
  if (text.length <= EVENT_SHOWN) return item;
  const data = { shown: `${text.slice(0, EVENT_SHOWN)}…`, characters: text.length };
  return { ...item, envelope: { ...item.envelope, data } };
}

// An event's data as shown: the beginning of a large one, and how much there is (the CLI prints it all).
function shown(data) {
  const text = json(data);
  if (text.length <= EVENT_SHOWN) return text;
  return `${text.slice(0, EVENT_SHOWN)}\n… ${text.length - EVENT_SHOWN} more characters (aiwg-serve events --json)`;
}

function describeError(r) {
  const d = r.data || {};
  return `${r.status} ${d.error || ''}${d.message ? `: ${d.message}` : ''}`.trim();
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Calls `fn` at once, then at most once per `ms` while calls keep coming; the last call is never lost.
function throttle(fn, ms) {
  let timer = null;
  let again = false;
  const run = () => {
    if (timer) { again = true; return; }
    fn();
    timer = setTimeout(() => { timer = null; if (again) { again = false; run(); } }, ms);
  };
  return run;
}

// A mission id the dispatch contract accepts (letters, digits, `-`), random without needing a secure
// context (crypto.randomUUID needs one; a serve on a LAN address over http is not).
function newMissionId() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return `m-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

// ---------------------------------------------------------------------------------------------------
// The API, with the token.

class SignInRequired extends Error {}

// Text as unpadded base64url (what a subprotocol may carry, whatever characters the text holds).
function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function authHeaders(extra) {
  const headers = { ...extra };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}

async function api(method, path, body) {
  const headers = authHeaders({ Accept: 'application/json' });
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401) {
    signIn(sessionStorage.getItem(TOKEN_KEY) ? 'That token was refused.' : null);
    throw new SignInRequired();
  }
  const text = await r.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = { error: 'unreadable_answer', message: text.slice(0, 200) }; }
  }
  // A persistent warning (`299 aiwg-serve "text"`), e.g. a dispatch whose id collides with another's.
  const warning = (r.headers.get('Warning') || '').replace(/^299 \S+ "(.*)"$/, '$1') || null;
  return { status: r.status, ok: r.ok, data, warning };
}

// Who the page acts for (`GET /api/v1/whoami`): a name, a role, and every operation that role may call
// as the OpenAPI document names it ('POST /api/v1/missions/{id}/abort'). A control is shown only when
// the operation it calls is among them; the page keeps no table of roles of its own (serve still judges
// every call: this only spares a caller controls that would be refused).
let me = { name: '', role: '', may: new Set() };

function may(op) {
  return me.may.has(op);
}

// Calls an operation named as the document names it, its `{id}` filled in: the name a control is
// offered by is the one it calls.
function send(op, id, body) {
  const [method, route] = op.split(' ');
  return api(method, route.replace('{id}', encodeURIComponent(id)), body);
}

// A refusal, shown where the control was used: its status, code and message, announced to a screen
// reader (a refused action is never silent).
function refusal(what, r) {
  return h('span', { class: 'error refusal', role: 'alert', 'data-status': String(r.status) }, `${what} refused: ${describeError(r)}`);
}

// The header says who is signed in, and the pages an operation behind them needs show only to whom may
// read them (`data-needs` in index.html).
function renderIdentity() {
  whoEl.textContent = me.name ? `${me.name} · ${me.role}` : '';
  whoEl.hidden = !me.name;
  for (const a of document.querySelectorAll('nav a[data-needs]')) a.hidden = !may(a.dataset.needs);
}

// ---------------------------------------------------------------------------------------------------
// The live stream: one per tab, shared by every page.

const live = {
  since: 0,
  running: false,
  controller: null,
  connectedOnce: false,
  listeners: new Set(),

  start(since) {
    this.stop();
    this.since = since;
    this.running = true;
    this.connectedOnce = false;
    this.loop();
  },

  stop() {
    this.running = false;
    if (this.controller) this.controller.abort();
    this.controller = null;
  },

  async loop() {
    let failures = 0;
    while (this.running) {
      const controller = new AbortController();
      this.controller = controller;
      try {
        if (await this.read(controller)) failures = 0;
      } catch (e) {
        if (e instanceof SignInRequired) return;
      }
      if (!this.running || this.controller !== controller) return;
      failures += 1;
      setLive('reconnecting', `reconnecting from event ${this.since}`);
      await sleep(Math.min(250 * 2 ** failures, 5000));
    }
  },

  // Reads one connection until it ends; true when it was established. A WebSocket, not a streamed
  // fetch: a browser opens at most six HTTP/1.1 connections to a host, and a stream would hold one per
  // tab for as long as the tab is open (the seventh tab's reads would wait forever); its WebSockets
  // are counted apart.
  async read(controller) {
    // What a refused upgrade cannot tell a page, an ordinary read of the same place says first: a token
    // refused (401), or events this tab has not seen compacted away (410).
    const q = new URLSearchParams({ follow: 'false', since: String(this.since), limit: '1', max_bytes: '1024' });
    const check = await fetch(`/api/v1/events?${q}`, { headers: authHeaders({ Accept: 'application/json' }), signal: controller.signal, cache: 'no-store' });
    if (check.status === 401) {
      signIn('That token was refused.');
      throw new SignInRequired();
    }
    if (check.status === 410) {
      // Retention compacted events this tab had not seen yet (it was away while serve compacted): they
      // are gone, so pick up at the first available and re-read what the page shows.
      const gone = await check.json().catch(() => ({}));
      if (!Number.isInteger(gone.resume_since) || gone.resume_since <= this.since) return false;
      this.since = gone.resume_since;
      compactedBefore = gone.resume_since;
      refreshAll();
      return true;
    }
    if (!check.ok) return false;
    // The token goes as a subprotocol (the one header a page's WebSocket sets), never in the URL.
    const token = sessionStorage.getItem(TOKEN_KEY);
    const protocols = ['aiwg.events', ...(token ? [`aiwg.bearer.${base64url(token)}`] : [])];
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const socket = new WebSocket(`${scheme}//${location.host}/ws/events?since=${this.since}`, protocols);
    return new Promise((resolve) => {
      let opened = false;
      controller.signal.addEventListener('abort', () => socket.close());
      socket.onopen = () => {
        opened = true;
        setLive('live', 'live');
        // After a drop (serve restarted, say) the page re-reads what it shows: the events it missed
        // arrive from the stream, but a page may have failed a read meanwhile.
        if (this.connectedOnce) refreshAll();
        this.connectedOnce = true;
      };
      socket.onmessage = (m) => this.item(JSON.parse(m.data));
      socket.onclose = () => resolve(opened);
    });
  },

  // One item of the stream, or its end (lagged behind, serve stopping): resumed from where it says.
  // Sequences are strictly increasing; one at or below the last seen was shown.
  item(item) {
    if (item.end) {
      this.since = Math.max(this.since, item.end.resume_since);
      return;
    }
    if (!(item.seq > this.since)) return;
    this.since = item.seq;
    for (const listener of this.listeners) listener(item);
  },
};

// The sequence up to which this tab learnt that events were compacted away (0: none known).
let compactedBefore = 0;

function setLive(state, text) {
  liveEl.dataset.state = state;
  liveEl.textContent = text;
}

// ---------------------------------------------------------------------------------------------------
// Sign-in.

let signingIn = false;

function signIn(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  live.stop();
  setLive('signed-out', 'signed out');
  signOutButton.hidden = true;
  me = { name: '', role: '', may: new Set() };
  renderIdentity();
  overviewEl.replaceChildren();
  if (current) current.dispose();
  current = null;
  if (signingIn && !message) return;
  signingIn = true;
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true });
  const form = h(
    'form',
    {
      class: 'card signin',
      onsubmit: (e) => {
        e.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        boot();
      },
    },
    h('h1', { tabindex: '-1' }, 'Sign in'),
    h('p', {}, 'This server needs an operator token (server.operator_tokens). '
      + 'The dashboard keeps it for this tab only and forgets it when the tab closes.'),
    message && h('p', { class: 'error', role: 'alert' }, message),
    h('label', { for: 'token' }, 'Operator token'),
    input,
    h('button', { type: 'submit' }, 'Sign in'),
  );
  view.replaceChildren(form);
  input.focus();
}

signOutButton.addEventListener('click', () => signIn(null));

// ---------------------------------------------------------------------------------------------------
// The overview bar: counts by state, executors, the queue.

const refreshOverview = throttle(async () => {
  try {
    const r = await api('GET', '/api/v1/overview');
    if (r.ok) renderOverview(r.data);
  } catch { /* shown by the live indicator */ }
}, 1000);

function renderOverview(o) {
  // One pending question per mission that waits for one: the tab's title counts them, so a pinned tab
  // says there is something to answer.
  const waiting = o.missions['hitl-required'] ?? 0;
  document.title = waiting > 0 ? `(${waiting}) aiwg-serve` : 'aiwg-serve';
  inboxCount.textContent = waiting > 0 ? String(waiting) : '';
  overviewEl.replaceChildren(h(
    'ul',
    { class: 'counts' },
    STATES.map((s) => h(
      'li',
      {},
      h('a', { href: `#/missions?state=${s}`, 'data-count': s }, badge(s), h('b', {}, String(o.missions[s] ?? 0))),
    )),
    h('li', { class: 'fleet-count' }, `${o.executors_connected} of ${o.executors_registered} executors connected`),
    h('li', {}, `queue ${o.queue_depth}`),
  ));
}

// Executors' names by id, as the pages last read them: events say who did what by name.
const executorNames = new Map();

async function readExecutorNames() {
  const r = await api('GET', '/api/v1/executors');
  if (r.ok) for (const x of r.data.executors) executorNames.set(x.executor_id, x.name);
}

// Who did what (serve says): the executor (by name, once known), serve, or the operator by name.
function byLabel(item) {
  const o = item.origin || { kind: 'executor' };
  if (o.kind === 'operator') return h('span', { class: 'by operator' }, `by ${o.name}`);
  if (o.kind === 'serve') return h('span', { class: 'by serve' }, 'by serve');
  const id = item.envelope.executor_id;
  return h('span', { class: 'by executor', title: id }, `by ${executorNames.get(id) || shortId(id)}`);
}

// One event of the log of every mission, one line: its sequence, time, type, who, its mission, and the
// start of its data, whose whole (up to EVENT_SHOWN characters) `open` shows.
function eventRow(item, open) {
  const e = item.envelope;
  const hasData = e.data !== undefined && e.data !== null;
  const flat = hasData ? JSON.stringify(e.data) : '';
  const li = h(
    'li',
    { 'data-seq': item.seq, 'data-event': e.event },
    h('span', { class: 'seq' }, `#${item.seq}`),
    ' ',
    time(item.received_at),
    ' ',
    h('strong', {}, e.event),
    ' ',
    byLabel(item),
    e.mission_id ? [' on ', missionLink(e.mission_id)] : '',
    // The button stays short: a line cut with an ellipsis hides a whole button that does not fit.
    hasData && [' ', h('button', { type: 'button', class: 'link data-open', onclick: () => open(item) }, 'data'), ' ',
      h('span', { class: 'data' }, flat.length > 120 ? `${flat.slice(0, 120)}…` : flat)],
  );
  // An event never changes: its row is drawn once.
  li.update = () => {};
  return li;
}

// ---------------------------------------------------------------------------------------------------
// Pages. Each renders into `view` and returns {onEvent, refresh, dispose}; the router keeps one.

let current = null;

function refreshAll() {
  refreshOverview();
  if (current) current.refresh();
}

function page(title, ...content) {
  const heading = h('h1', { tabindex: '-1' }, title);
  view.replaceChildren(heading, ...content);
  return heading;
}

// A table row whose cells are rewritten in place, each only when what it shows changed (`row.show(name,
// key, ...content)` with the key of what it shows), so that a selection, a focused box or a click in
// the row survives the live updates of the page. `cells`: [name, class] in order, after `lead`.
function keyedRow(attrs, cells, lead = []) {
  const tds = Object.fromEntries(cells.map(([name, cls]) => [name, h(name === 'name' ? 'th' : 'td', cls ? { class: cls } : {})]));
  if (tds.name) tds.name.setAttribute('scope', 'row');
  const row = h('tr', attrs, lead, Object.values(tds));
  const shown = new Map();
  row.cell = (name) => tds[name];
  row.show = (name, key, ...content) => {
    if (shown.has(name) && shown.get(name) === key) return;
    shown.set(name, key);
    fill(tds[name], ...content);
  };
  return row;
}

// Puts one row per item in `tbody`, in the items' order: made once (`make`), updated in place
// (`row.update`), removed when its item is gone; a row already in its place is not moved.
function syncRows(tbody, rows, items, keyOf, make) {
  const keys = new Set(items.map(keyOf));
  for (const [k, row] of rows) if (!keys.has(k)) { row.remove(); rows.delete(k); }
  let before = null;
  for (const item of items) {
    const k = keyOf(item);
    let row = rows.get(k);
    if (!row) { row = make(item); rows.set(k, row); }
    row.update(item);
    const at = before ? before.nextSibling : tbody.firstChild;
    if (at !== row) tbody.insertBefore(row, at);
    before = row;
  }
}

function table(caption, headings, rows) {
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      {},
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, headings.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows),
    ),
  );
}

function field(label, id, input) {
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input);
}

function fromLocalInput(value) {
  return value ? new Date(value).toISOString() : '';
}

function toLocalInput(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
}

// An id as a person reads it: short, the whole of it on hover and in the clipboard.
function shortId(id) {
  return id.length > 14 ? `${id.slice(0, 12)}…` : id;
}

// A length of time as "42 s", "7 min", "3.5 h", "2 d".
function span(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${Math.round(s / 86400)} d`;
}

// How long a mission took, or (live) has taken so far by the reader's clock.
function duration(m) {
  if (m.duration_s !== undefined) return span(m.duration_s);
  const s = (Date.now() - Date.parse(m.created_at)) / 1000;
  return Number.isNaN(s) ? '' : `${span(s)} so far`;
}

const SORTS = { created: 'Newest first', updated: 'Most recently active first', duration: 'Longest first (ended)' };

// The filters of the missions page, from the URL and back.
function missionFilters(params) {
  const filters = {};
  for (const k of ['q', 'state', 'executor_id', 'session_id', 'updated_since', 'sort']) {
    if (params.get(k)) filters[k] = params.get(k);
  }
  const chosen = new Set((filters.state || '').split(',').filter(Boolean));
  // The states fold into one line (the list's rows need the height), what is chosen said on it.
  const states = h('details', { class: 'states' },
    h('summary', {}, chosen.size ? `States: ${[...chosen].join(', ')}` : 'States: any'),
    h('fieldset', {}, h('legend', { class: 'sr' }, 'States'), STATES.map((st) => h(
      'label', {}, h('input', { type: 'checkbox', name: 'state', value: st, checked: chosen.has(st) }), ` ${st}`,
    ))));
  const search = h('input', { type: 'search', value: filters.q || '', placeholder: 'id or objective' });
  const executor = h('input', { type: 'text', value: filters.executor_id || '', placeholder: 'name or id' });
  const session = h('input', { type: 'text', value: filters.session_id || '' });
  const since = h('input', { type: 'datetime-local', value: filters.updated_since ? toLocalInput(filters.updated_since) : '' });
  const sort = h('select', {}, Object.entries(SORTS).map(([v, label]) => h('option', { value: v, selected: (filters.sort || 'created') === v }, label)));
  const form = h(
    'form',
    {
      class: 'filters',
      role: 'search',
      onsubmit: (e) => {
        e.preventDefault();
        const q = new URLSearchParams();
        const ticked = [...states.querySelectorAll('input:checked')].map((i) => i.value);
        if (search.value.trim()) q.set('q', search.value.trim());
        if (ticked.length) q.set('state', ticked.join(','));
        if (executor.value.trim()) q.set('executor_id', executor.value.trim());
        if (session.value.trim()) q.set('session_id', session.value.trim());
        if (since.value) q.set('updated_since', fromLocalInput(since.value));
        if (sort.value !== 'created') q.set('sort', sort.value);
        location.hash = `#/missions?${q}`;
      },
    },
    field('Search', 'f-q', search),
    states,
    field('Executor', 'f-executor', executor),
    field('Session', 'f-session', session),
    field('Updated since', 'f-since', since),
    field('Order', 'f-sort', sort),
    h('button', { type: 'submit' }, 'Filter'),
  );
  return { filters, form };
}

// When the first rows of missions were painted, as `performance` entry `aiwg:first-rows` (from the
// navigation's start): what aiwg-bench measures in Chromium. Marked at the frame after the one that drew
// them, so never early.
let firstRowsMarked = false;
function markFirstRows() {
  if (firstRowsMarked) return;
  firstRowsMarked = true;
  requestAnimationFrame(() => requestAnimationFrame(() => performance.mark('aiwg:first-rows')));
}

// How long ago `ts` was, as "42 s ago", "7 min ago", "3.5 h ago": one line in a list; the exact time
// on hover (and in `datetime`).
function agoText(ts) {
  const t = Date.parse(ts);
  return Number.isNaN(t) ? ts || '' : `${span((Date.now() - t) / 1000)} ago`;
}

function ago(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? ts : h('time', { datetime: ts, title: `${local(d)} (${ts})` }, agoText(ts));
}

// One mission's row (a keyed row: a selection of its id survives live updates), one line high: long
// texts are cut with their whole on hover. The pick box only for whom may abort.
function missionRow(m, pickable) {
  const tick = pickable && h('input', { type: 'checkbox', 'aria-label': `select ${m.mission_id}`, 'data-pick': m.mission_id });
  const link = h('a', { href: `#/missions/${encodeURIComponent(m.mission_id)}`, title: m.mission_id, class: 'id' }, shortId(m.mission_id));
  const row = keyedRow({ 'data-mission': m.mission_id },
    [['id'], ['objective', 'clip objective'], ['executor', 'clip executor'], ['waiting', 'clip waiting'], ['state'],
      ['attempt', 'attempt'], ['created', 'when'], ['duration', 'duration'], ['activity', 'when activity'], ['cost', 'cost'],
      ['exit'], ['error', 'clip']],
    pickable ? [h('td', {}, tick)] : []);
  row.show('id', m.mission_id, link);
  const clipped = (name, text) => {
    row.show(name, text, text || '');
    row.cell(name).title = text || '';
  };
  row.update = (next) => {
    row.data = next;
    clipped('objective', next.objective);
    row.show('executor', `${next.executor_id}${next.executor_name}`, next.executor_id
      ? h('span', { title: next.executor_id }, next.executor_name || shortId(next.executor_id)) : '');
    clipped('waiting', next.queued_reason);
    row.show('state', next.state, badge(next.state));
    row.show('attempt', next.attempt, String(next.attempt || 1));
    row.show('created', `${next.created_at} ${agoText(next.created_at)}`, ago(next.created_at));
    row.show('duration', duration(next), duration(next));
    row.show('activity', `${next.updated_at} ${agoText(next.updated_at)}`, ago(next.updated_at));
    row.show('cost', `${next.cost_usd}${next.cost_source}`, costText(next));
    row.show('exit', next.exit_code, next.exit_code ?? '');
    clipped('error', next.error);
  };
  row.picked = () => Boolean(tick && tick.checked);
  return row;
}

// How often the list's relative times ("3 min ago") are said again when nothing else changes.
const AGO_MS = 15000;
const MISSION_COLUMNS = ['Mission', 'Objective', 'Executor', 'Waiting because', 'State', 'Attempt', 'Created', 'Duration',
  'Last activity', 'Cost', 'Exit', 'Error'];

// Missions: search and filters, counts (the overview bar), pages of 50 over any number of missions, and
// aborting several at once (for whom may abort). Rows are one line, so that a screen shows many.
function missionsPage(params) {
  const { filters, form } = missionFilters(params);
  const pickable = may('POST /api/v1/missions/{id}/abort');
  const cursors = [null];
  const rows = new Map();
  const tbody = h('tbody', {});
  const listing = h('div', { class: 'scroll' }, h('table', { class: 'missions' },
    h('caption', { class: 'sr' }, SORTS[filters.sort || 'created']),
    h('thead', {}, h('tr', {}, pickable && h('th', { scope: 'col' }, h('span', { class: 'sr' }, 'Pick')),
      MISSION_COLUMNS.map((t) => h('th', { scope: 'col' }, t)))),
    tbody));
  const empty = h('p', { hidden: true }, 'No missions match.');
  const status = h('p', { role: 'status', class: 'note' });
  const body = h('div', { 'aria-live': 'polite' }, listing, empty);
  const abortPicked = pickable && h('button', { type: 'button', class: 'danger', onclick: () => confirmAbort() }, 'Abort selected…');
  const confirmBox = h('div', { class: 'confirm', hidden: true });
  const turn = (step) => { step(); rows.clear(); tbody.replaceChildren(); load(); };
  const newer = h('button', { type: 'button', onclick: () => turn(() => cursors.pop()) }, '← Previous');
  const older = h('button', { type: 'button', onclick: () => turn(() => cursors.push(older.dataset.cursor)) }, 'Next →');
  const batch = h('div', { class: 'batch' }, h('span', { class: 'note' }, SORTS[filters.sort || 'created']),
    abortPicked, confirmBox, status, h('div', { class: 'pager' }, newer, older));
  // The batch bar and the pager beside the heading: the height goes to the rows.
  const heading = page('Missions', form, body);
  const titled = h('div', { class: 'titled' });
  heading.replaceWith(titled);
  titled.append(heading, batch);

  const picked = () => [...rows.entries()].filter(([, row]) => row.picked()).map(([id]) => id);
  function confirmAbort() {
    const ids = picked();
    if (!ids.length) { status.textContent = 'Tick the missions to abort first.'; return; }
    fill(confirmBox,
      `Abort ${ids.length} mission${ids.length === 1 ? '' : 's'}? `,
      h('button', { type: 'button', class: 'danger', 'data-confirm': '', onclick: () => abortAll(ids) }, `Abort ${ids.length}`),
      ' ',
      h('button', { type: 'button', onclick: () => { confirmBox.hidden = true; } }, 'Cancel'));
    confirmBox.hidden = false;
  }
  async function abortAll(ids) {
    confirmBox.hidden = true;
    const answers = await Promise.all(ids.map((id) => send('POST /api/v1/missions/{id}/abort', id, {})));
    const refused = answers.map((r, i) => [ids[i], r]).filter(([, r]) => !r.ok);
    fill(status, refused.length
      ? h('span', { class: 'error', role: 'alert', 'data-status': String(refused[0][1].status) },
        `Aborted ${ids.length - refused.length}; refused: ${refused.map(([id, r]) => `${shortId(id)} (${describeError(r)})`).join(', ')}`)
      : `Aborted ${ids.length}.`);
    for (const id of ids) if (rows.has(id)) rows.get(id).querySelector('[data-pick]').checked = false;
    refresh();
  }

  let alive = true;
  async function load() {
    const q = new URLSearchParams({ ...filters, limit: '50' });
    const cursor = cursors[cursors.length - 1];
    if (cursor) q.set('cursor', cursor);
    const r = await api('GET', `/api/v1/missions?${q}`);
    if (!alive) return;
    if (!r.ok) {
      status.replaceChildren(h('span', { class: 'error', role: 'alert' }, describeError(r)));
      return;
    }
    syncRows(tbody, rows, r.data.missions, (m) => m.mission_id, (m) => missionRow(m, pickable));
    empty.hidden = rows.size > 0;
    listing.hidden = rows.size === 0;
    if (rows.size) markFirstRows();
    newer.disabled = cursors.length === 1;
    older.disabled = !r.data.next_cursor;
    if (r.data.next_cursor) older.dataset.cursor = r.data.next_cursor;
  }
  const refresh = throttle(() => load().catch(() => {}), REFRESH_MS);
  refresh();
  // "3 min ago" grows old by itself: said again from what was read, with no read.
  const tick = setInterval(() => { for (const row of rows.values()) row.update(row.data); }, AGO_MS);
  return {
    onEvent: (item) => { if (item.envelope.mission_id) refresh(); },
    refresh,
    dispose: () => { alive = false; clearInterval(tick); },
  };
}

// What an event says in a few words: its state, reason, error, exit code or summary.
function gist(e) {
  const d = e.data || {};
  const parts = [d.summary, d.message, d.state && `state ${d.state}`, d.reason && `reason ${d.reason}`,
    d.error, d.exit_code !== undefined && `exit ${d.exit_code}`, d.prompt, d.attempt && `attempt ${d.attempt}`];
  return parts.filter((p) => p !== undefined && p !== null && p !== false && p !== '').map(String).join(' · ');
}

// One step of a mission's timeline: a line, the event's data on demand.
function stepRow(item) {
  const e = item.envelope;
  const hasData = e.data !== undefined && e.data !== null;
  const li = h('li', { 'data-seq': item.seq, 'data-event': e.event },
    time(item.received_at), ' ', h('strong', {}, e.event.replace('mission.', '')), ' ', byLabel(item), ' ',
    h('span', { class: 'gist' }, gist(e)),
    hasData && h('details', {}, h('summary', {}, 'data'), h('pre', {}, shown(e.data))));
  li.item = item;
  return li;
}

// Consecutive progress as one row: how many, the latest line, each one on demand (rendered only when
// opened: a long job's thousands of lines cost nothing until then).
function progressGroup(first) {
  const items = [];
  const count = h('strong', {});
  const latest = h('span', { class: 'gist latest' });
  const list = h('ol', { class: 'progress' });
  const details = h('details', { ontoggle: () => { if (details.open) list.replaceChildren(...items.map(stepRow)); else list.replaceChildren(); } },
    h('summary', {}, count, ' ', latest), list);
  const li = h('li', { class: 'group', 'data-event': 'mission.progress', 'data-seq': first.seq }, details);
  li.group = {
    add(item) {
      items.push(item);
      fill(count, items.length === 1 ? 'progress' : `${items.length} progress`);
      fill(latest, gist(item.envelope), ' · ', time(item.received_at));
      if (details.open) list.append(stepRow(item));
    },
  };
  li.group.add(first);
  return li;
}

// One mission: what it is, where it went and why, every event, its controls and its pending question.
function missionPage(id) {
  const summary = h('dl', { class: 'summary' });
  const controls = h('div', { class: 'controls' });
  const outcome = h('p', { class: 'outcome', role: 'status' });
  const hitl = h('section', { 'aria-labelledby': 'hitl-h' });
  const routing = h('section', { 'aria-labelledby': 'routing-h' });
  const artifacts = h('section', { 'aria-labelledby': 'artifacts-h' });
  const log = logView(id);
  const timeline = h('ol', { class: 'timeline', id: 'timeline' });
  const timelineNote = h('p', { class: 'note' });
  page(
    `Mission ${id}`,
    summary,
    h('section', { 'aria-label': 'Controls' }, controls, outcome),
    hitl,
    routing,
    artifacts,
    log.el,
    h('section', { 'aria-labelledby': 'timeline-h' }, h('h2', { id: 'timeline-h' }, 'Timeline'), timelineNote, timeline),
  );
  // Each control only for whom may use it; of those, only what the mission's state allows (below).
  for (const action of ['pause', 'resume', 'abort'].filter((a) => may(`POST /api/v1/missions/{id}/${a}`))) {
    controls.append(h('button', { type: 'button', id: `do-${action}`, 'data-control': action, disabled: true, onclick: () => control(action) },
      action[0].toUpperCase() + action.slice(1)));
  }
  // Retry or clone: the dispatch form, filled in as this mission was asked, under a new id.
  if (may('POST /api/v1/sessions/{id}/dispatch')) {
    controls.append(' ', h('a', { class: 'button', id: 'do-again', href: `#/dispatch?from=${encodeURIComponent(id)}` }, 'Dispatch again…'));
  }

  let alive = true;
  const seen = new Set();
  let lastSeq = 0;

  async function control(action) {
    outcome.textContent = `${action}: sending…`;
    const r = await send(`POST /api/v1/missions/{id}/${action}`, id);
    if (!alive) return;
    if (r.ok) {
      const d = r.data;
      outcome.textContent = d.delivered
        ? `${action}: delivered to the executor (state ${d.state})`
        : `${action}: not delivered (state ${d.state})${d.note ? `: ${d.note}` : ''}`;
    } else {
      fill(outcome, refusal(action, r));
    }
    outcome.dataset.status = String(r.status);
    refresh();
  }

  function renderSummary(m) {
    const rows = [
      ['State', badge(m.state)],
      ['Objective', m.objective],
      ['Completion', m.completion],
      ['Executor', m.executor_id && h('a', { href: `#/executors/${encodeURIComponent(m.executor_id)}`, title: m.executor_id },
        m.executor_name || m.executor_id)],
      ['Dispatched by', m.dispatched_by],
      ['Queued because', m.queued_reason],
      ['Session', m.session_id],
      ['Created', time(m.created_at)],
      ['Duration', duration(m)],
      ['Updated', time(m.updated_at)],
      ['Silent for', silence(m)],
      ['Waiting for', m.state === 'queued' ? span((Date.now() - Date.parse(m.updated_at)) / 1000) : ''],
      ['Away for', m.state === 'suspended' ? span((Date.now() - Date.parse(m.updated_at)) / 1000) : ''],
      ['Timeouts', timeouts(m.timeouts)],
      ['Attempts', attempts(m.attempts)],
      ['Completed', time(m.completed_at)],
      ['Exit code', exitCodes(m)],
      ['Error', m.error],
      ['Checkpoint', m.checkpoint_id],
      ['Work kept on', m.work && [h('code', {}, m.work.branch), m.work.commit ? ` at ${m.work.commit.slice(0, 12)}` : '']],
      ['Usage', m.usage && tokensText(m.usage)],
      ['Cost', m.usage && costText(m)],
      ['Budget', m.budget && budgetText(m.budget)],
      ['Models', m.usage && m.usage.models.length > 1 && h('ul', { class: 'models' },
        m.usage.models.map((u) => h('li', {}, h('code', {}, u.model), `: ${tokensText(u)}; ${costText(u)}`)))],
    ];
    definitions(summary, rows);
    // Only what the mission's state allows (serve says which); the executor's own answer is the outcome's.
    for (const b of controls.querySelectorAll('button[data-control]')) b.disabled = !(m.controls || []).includes(b.dataset.control);
  }

  // The question for everyone; the form that answers it for whom may answer. A refused answer is
  // said in the form, whose text stays to be sent again.
  function renderHitl(m) {
    if (!m.hitl) {
      hitl.replaceChildren();
      return;
    }
    const q = m.hitl;
    const answering = may('POST /api/v1/missions/{id}/hitl_response');
    const answer = h('textarea', { rows: '3', required: true });
    const said = h('p', { class: 'form-status' });
    async function submit(e) {
      e.preventDefault();
      said.replaceChildren();
      // The answer's outcome goes where the controls' go: the form leaves once it is answered.
      outcome.textContent = 'answer: sending…';
      const r = await send('POST /api/v1/missions/{id}/hitl_response', id, { hitl_id: q.hitl_id, response: answer.value });
      outcome.textContent = r.ok ? `answer ${r.data.delivered ? 'delivered to the executor' : 'not delivered'} (state ${r.data.state})` : '';
      if (!r.ok) fill(said, refusal('answer', r));
      outcome.dataset.status = String(r.status);
      refresh();
    }
    fill(
      hitl,
      h('h2', { id: 'hitl-h' }, 'Waiting for an answer'),
      h(
        'form',
        { class: 'card hitl', onsubmit: submit },
        h('p', { class: 'prompt' }, q.prompt),
        q.context && h('pre', {}, q.context),
        h('p', { class: 'note' }, `request ${q.hitl_id}, asked `, time(q.requested_at),
          q.expires_at ? [', expires ', time(q.expires_at)] : ''),
        answering ? [field('Your answer', 'hitl-answer', answer), h('button', { type: 'submit' }, 'Send answer'), said]
          : h('p', { class: 'note' }, `An operator answers it; ${me.name} is a ${me.role}.`),
      ),
    );
  }

  function renderRouting(m) {
    const r = m.routing;
    if (!r) {
      routing.replaceChildren();
      return;
    }
    fill(
      routing,
      h('h2', { id: 'routing-h' }, 'Routing'),
      h('p', {}, r.chosen ? ['Chosen: ', h('strong', {}, r.chosen_name || r.chosen), r.chosen_name ? ` (${r.chosen})` : ''] : 'No executor chosen', r.reason ? ` (${r.reason})` : ''),
      r.rejected.length
        ? h('ul', { class: 'rejected' }, r.rejected.map((x) => h('li', {}, h('strong', {}, x.name || x.executor_id), x.name ? ` (${x.executor_id})` : '', `: ${x.reason}`)))
        : h('p', {}, 'No candidate was passed over.'),
      r.rejected_omitted && h('p', { class: 'note' }, `and ${r.rejected_omitted} more passed over`),
    );
  }

  // The files its executor uploaded (serve's list), each downloaded with the operator's token, and the
  // paths an executor named in its end event (which serve holds no bytes of).
  async function renderArtifacts() {
    const r = await api('GET', `/api/v1/missions/${encodeURIComponent(id)}/artifacts`);
    if (!alive) return;
    // A mission that is not there says so in its summary; any other refusal is said here.
    if (!r.ok && r.status !== 404) { fill(artifacts, refusal('reading its artifacts', r)); return; }
    const stored = r.ok ? r.data.artifacts : [];
    const done = [...timeline.children].map((li) => li.item).filter((i) => i && i.envelope.event === 'mission.completed');
    const named = done.flatMap((i) => (i.envelope.data && Array.isArray(i.envelope.data.artifacts) ? i.envelope.data.artifacts : []));
    fill(artifacts, ...(stored.length || named.length ? [
      h('h2', { id: 'artifacts-h' }, 'Artifacts'),
      stored.length > 0 && h('ul', { class: 'artifacts' }, stored.map((a) => h('li', {},
        h('button', { type: 'button', class: 'link', onclick: (e) => download(a.uri, a.name, e.target.parentElement.querySelector('.said')) }, a.name),
        ` ${a.size_bytes} bytes, ${a.mime} `, h('code', { title: a.digest }, a.digest.slice(0, 19)), ' ', h('span', { class: 'said' })))),
      named.length > 0 && h('ul', {}, named.map((a) => h('li', {}, h('code', {}, String(a.path)), a.description ? ` ${a.description}` : ''))),
    ] : []));
  }

  function addEvent(item) {
    if (seen.has(item.seq)) return;
    seen.add(item.seq);
    const progress = item.envelope.event === 'mission.progress';
    if (item.seq > lastSeq) {
      lastSeq = item.seq;
      const last = timeline.lastElementChild;
      if (progress && last && last.group) last.group.add(item);
      else timeline.append(progress ? progressGroup(item) : stepRow(item));
    } else {
      // Older than what is shown (a page read after a live event): in its place, ungrouped.
      const after = [...timeline.children].find((x) => Number(x.dataset.seq) > item.seq);
      timeline.insertBefore(progress ? progressGroup(item) : stepRow(item), after || null);
    }
    if (['mission.completed', 'mission.failed', 'mission.aborted'].includes(item.envelope.event)) renderArtifacts().catch(() => {});
  }

  async function loadTimeline() {
    let since = 0;
    let bytes = 0;
    for (;;) {
      const q = new URLSearchParams({
        follow: 'false', mission_id: id, since: String(since), limit: '1000', max_bytes: String(TIMELINE_PAGE_BYTES),
      });
      const r = await api('GET', `/api/v1/events?${q}`);
      if (!alive) return;
      if (!r.ok) { fill(timelineNote, refusal('reading the timeline', r)); return; }
      r.data.events.forEach(addEvent);
      bytes += r.data.events.reduce((n, item) => n + JSON.stringify(item.envelope.data ?? null).length, 0);
      since = r.data.next_since;
      if (!r.data.more) break;
      if (seen.size >= TIMELINE_MAX || bytes >= TIMELINE_BYTES) {
        timelineNote.textContent = `The first ${seen.size} events; the rest: aiwg-serve events --mission ${id}`;
        break;
      }
    }
  }

  // The HITL form is re-rendered only when the question changes, so an answer being typed survives
  // the progress events that keep arriving meanwhile.
  let shownHitl;
  async function load() {
    const r = await api('GET', `/api/v1/missions/${encodeURIComponent(id)}`);
    if (!alive) return;
    if (!r.ok) {
      summary.replaceChildren(h('p', { class: 'error', role: 'alert' }, describeError(r)));
      controls.hidden = true;
      return;
    }
    controls.hidden = false;
    if (r.data.executor_name) executorNames.set(r.data.executor_id, r.data.executor_name);
    renderSummary(r.data);
    const hitlId = r.data.hitl ? r.data.hitl.hitl_id : null;
    if (hitlId !== shownHitl) {
      shownHitl = hitlId;
      renderHitl(r.data);
    }
    renderRouting(r.data);
    log.show(r.data);
  }
  const refresh = throttle(() => load().catch(() => {}), REFRESH_MS);

  // The timeline says who did what by name: the names first (executors of earlier attempts too).
  Promise.all([load(), readExecutorNames()]).then(() => { refresh(); return loadTimeline(); }).catch(() => {});
  renderArtifacts().catch(() => {});
  return {
    onEvent: (item) => {
      if (item.envelope.mission_id !== id) return;
      addEvent(item);
      refresh();
    },
    refresh: () => { refresh(); loadTimeline().catch(() => {}); },
    dispose: () => { alive = false; log.dispose(); },
  };
}

// Downloads what `path` answers with the operator's token (a link cannot carry it), as `name`; a
// refusal is said in `place`.
async function download(path, name, place) {
  const r = await fetch(path, { headers: authHeaders() });
  if (!r.ok) {
    const data = await r.json().catch(() => null);
    fill(place, refusal('download', { status: r.status, data }));
    return;
  }
  place.replaceChildren();
  const url = URL.createObjectURL(await r.blob());
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// A mission's log: its last LOG_LINES lines, then what comes while it lives (one streamed read, asked
// again from its last lines when serve restarts), with the agents' ANSI colours as styles, a search,
// a jump to the end and a download of the whole log. The agents' text is text: an escape sequence
// becomes a class on a span (from a fixed set), never markup.
function logView(id) {
  const out = h('pre', { class: 'log', id: 'log', tabindex: '0', 'aria-label': 'Mission log' });
  const search = h('input', { type: 'search', id: 'log-search', placeholder: 'Search the log' });
  const found = h('span', { class: 'note', role: 'status' });
  const note = h('p', { class: 'note' });
  const el = h('section', { 'aria-labelledby': 'log-h', hidden: true },
    h('h2', { id: 'log-h' }, 'Log'),
    h('div', { class: 'buttons log-tools' },
      h('label', { class: 'sr', for: 'log-search' }, 'Search the log'), search, found,
      h('button', { type: 'button', id: 'log-next', onclick: () => next() }, 'Next match'),
      h('button', { type: 'button', id: 'log-end', onclick: () => { out.scrollTop = out.scrollHeight; } }, 'Jump to end'),
      h('button', { type: 'button', id: 'log-download', onclick: () => download(`/api/v1/missions/${encodeURIComponent(id)}/log`, `${id}.log`, found) }, 'Download')),
    note, out);
  let reading = null;
  let started = false;
  let live = false;
  let style = {};
  let line = null;
  let matches = [];
  let at = -1;

  function newLine() {
    line = h('div', { class: 'line' });
    out.append(line);
    while (out.childElementCount > LOG_LINES) out.firstElementChild.remove();
  }

  // Appends decoded text, its SGR sequences turned into styles; other escapes are dropped.
  function append(text) {
    const stick = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    const parts = text.replace(/\r(?!\n)/g, '').split(/(\x1b\[[0-9;?]*[A-Za-z])/);
    for (const part of parts) {
      if (!part) continue;
      if (part[0] === '\x1b') {
        if (part.endsWith('m')) style = sgr(style, part.slice(2, -1));
        continue;
      }
      const pieces = part.split('\n');
      pieces.forEach((piece, i) => {
        if (i > 0 || !line) newLine();
        if (piece) line.append(h('span', { class: classes(style) || undefined }, piece));
      });
    }
    if (search.value) highlight();
    if (stick) out.scrollTop = out.scrollHeight;
  }

  function highlight() {
    const q = search.value.toLowerCase();
    matches = [];
    for (const l of out.children) {
      const hit = q !== '' && l.textContent.toLowerCase().includes(q);
      l.classList.toggle('match', hit);
      if (hit) matches.push(l);
    }
    found.textContent = q ? `${matches.length} matching line${matches.length === 1 ? '' : 's'}` : '';
  }

  function next() {
    if (!matches.length) return;
    at = (at + 1) % matches.length;
    matches.forEach((m, i) => m.classList.toggle('current', i === at));
    matches[at].scrollIntoView({ block: 'center' });
  }
  search.addEventListener('input', () => { at = -1; highlight(); });

  // One read: the last lines, then (live) what follows until the mission ends or serve stops.
  async function read() {
    const controller = new AbortController();
    reading = controller;
    const q = new URLSearchParams({ tail: String(LOG_LINES), follow: String(live) });
    const r = await fetch(`/api/v1/missions/${encodeURIComponent(id)}/log?${q}`, { headers: authHeaders(), signal: controller.signal });
    if (!r.ok) {
      note.textContent = r.status === 410 ? 'Retention removed this log with the mission\'s history.' : `The log could not be read (${r.status}).`;
      return;
    }
    out.replaceChildren();
    line = null;
    style = {};
    const reader = r.body.getReader();
    const text = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      append(text.decode(value, { stream: true }));
    }
    append(text.decode());
  }

  async function follow() {
    while (!reading || !reading.signal.aborted) {
      try { await read(); } catch { /* aborted, or the connection dropped */ }
      if (!live || (reading && reading.signal.aborted)) return;
      await sleep(1000);
    }
  }

  return {
    el,
    // The mission as read: the section shows once it has a log; a live one is followed.
    show(m) {
      live = !['done', 'failed', 'aborted'].includes(m.state);
      if (!m.log || started) return;
      started = true;
      el.hidden = false;
      note.textContent = m.log.dropped_bytes ? `${m.log.dropped_bytes} bytes past the log's cap were dropped (shown where they were).` : '';
      follow();
    },
    dispose() { if (reading) reading.abort(); reading = { signal: { aborted: true } }; },
  };
}

// The styles an SGR sequence (`1;31`, `0`, `38;5;208`) leaves in force: bold, italic, underline, and a
// foreground and background of the 16 standard colours (others are ignored).
function sgr(style, params) {
  const s = { ...style };
  const codes = params === '' ? [0] : params.split(';').map(Number);
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) Object.keys(s).forEach((k) => delete s[k]);
    else if (c === 1) s.bold = true;
    else if (c === 3) s.italic = true;
    else if (c === 4) s.underline = true;
    else if (c === 22) delete s.bold;
    else if (c === 23) delete s.italic;
    else if (c === 24) delete s.underline;
    else if (c >= 30 && c <= 37) s.fg = c - 30;
    else if (c >= 90 && c <= 97) s.fg = c - 90 + 8;
    else if (c === 39) delete s.fg;
    else if (c >= 40 && c <= 47) s.bg = c - 40;
    else if (c >= 100 && c <= 107) s.bg = c - 100 + 8;
    else if (c === 49) delete s.bg;
    else if (c === 38 || c === 48) i += codes[i + 1] === 5 ? 2 : 4;
  }
  return s;
}

function classes(s) {
  return [s.bold && 'ansi-bold', s.italic && 'ansi-italic', s.underline && 'ansi-underline',
    s.fg !== undefined && `ansi-fg-${s.fg}`, s.bg !== undefined && `ansi-bg-${s.bg}`].filter(Boolean).join(' ');
}

// A summary list: each (label, value) with a value, as a term and its definition.
// The exit code and whose it is: the agent's, the completion check's, or both (serve says which it knows).
function exitCodes(m) {
  const c = m.exit_codes;
  if (!c) return m.exit_code;
  return [c.agent !== undefined && `agent ${c.agent}`, c.completion_check !== undefined && `completion check ${c.completion_check}`]
    .filter(Boolean).join(' · ');
}

// Token counts as a person reads them: input and output, with their cached and reasoning parts.
function tokensText(u) {
  const n = (x) => (x || 0).toLocaleString('en-US');
  const cached = (u.cache_read_input_tokens || 0) + (u.cache_creation_input_tokens || 0);
  return `${n(u.input_tokens)} in${cached ? ` (${n(cached)} cached)` : ''} · ${n(u.output_tokens)} out`
    + `${u.reasoning_output_tokens ? ` (${n(u.reasoning_output_tokens)} reasoning)` : ''}`;
}

// What a mission or a sum cost: dollars and, unless reported, where they come from; unpriced is never $0.
function costText(s) {
  if (!s || !s.cost_source) return '';
  if (s.cost_usd === undefined) return s.cost_source;
  const usd = `$${s.cost_usd.toFixed(s.cost_usd < 10 ? 4 : 2)}`;
  return s.cost_source === 'reported' ? usd : `${usd} ${s.cost_source}`;
}

function definitions(dl, rows) {
  dl.replaceChildren(...rows.filter(([, v]) => v !== undefined && v !== null && v !== '')
    .flatMap(([k, v]) => [h('dt', {}, k), h('dd', { 'data-field': k.toLowerCase().replace(/ /g, '-') }, v)]));
}

// An executor's readiness report, asked for now, as shown.
async function askReadiness(id) {
  const r = await api('GET', `/api/v1/executors/${encodeURIComponent(id)}/readiness`);
  return r.ok ? readinessView(r.data) : h('span', { class: 'error' }, describeError(r));
}

// An executor's class (Vagaris): what it declares, else an interactive local one.
function classOf(capabilities) {
  const c = capabilities.find((x) => x.startsWith('x-class:'));
  return c ? c.slice('x-class:'.length) : 'interactive_local';
}

// A readiness check's answer: ready or not, the budget, the credential, the gaps, and whether serve would
// send it unattended missions.
function readinessView(c) {
  if (!c.report) return h('span', { class: 'not-ready' }, `✗ no report: ${c.error || 'none served'}`);
  const gaps = Array.isArray(c.report.gaps) ? c.report.gaps : [];
  return h(
    'div',
    {},
    h('span', { class: c.report.ready ? 'ready' : 'not-ready' }, c.report.ready ? '✓ ready' : '✗ not ready'),
    c.report.budget && ` · budget ${c.report.budget.state}`,
    'credential_expires_at' in c.report && ` · credential ${c.report.credential_expires_at ? `expires ${c.report.credential_expires_at}` : 'does not expire'}`,
    gaps.length > 0 && h('ul', {}, gaps.map((g) => h('li', {}, `${g.kind}: ${g.detail}`))),
    h('div', { class: 'note' }, c.unattended_ready ? 'takes unattended missions' : `no unattended missions: ${c.gap}`),
  );
}

// The fleet: every executor, sandbox and HTTP runtime, with drain and readiness.
function fleetPage() {
  const executors = h('div', { 'aria-live': 'polite' });
  const sandboxes = h('div');
  const runtimes = h('div');
  page('Fleet', executors, sandboxes, runtimes);
  let alive = true;
  const readiness = new Map();

  async function all(path, key) {
    const out = [];
    let cursor = null;
    for (let i = 0; i < 20; i += 1) {
      const r = await api('GET', cursor ? `${path}?cursor=${encodeURIComponent(cursor)}` : path);
      if (!r.ok) throw new Error(describeError(r));
      out.push(...r.data[key]);
      cursor = r.data.next_cursor;
      if (!cursor) break;
    }
    return out;
  }

  // What the row's last cell says of an executor (a readiness report, an error), and a count of its
  // changes: the cell is rewritten when it changes, not at every reload.
  const said = new Map();
  function say(id, what) {
    readiness.set(id, what);
    said.set(id, (said.get(id) || 0) + 1);
  }

  async function drain(id, on) {
    const r = await send(`${on ? 'POST' : 'DELETE'} /api/v1/executors/{id}/drain`, id);
    if (!r.ok) say(id, refusal(on ? 'drain' : 'undrain', r));
    load();
  }

  // Removing a stale executor (its token revoked, its id released) asks first, in the row.
  const removing = new Set();
  async function remove(id) {
    removing.delete(id);
    const r = await send('POST /api/v1/executors/{id}/remove', id);
    say(id, r.ok ? 'removed' : refusal('remove', r));
    load();
  }

  // What an executor row offers: readiness and drain while it is connected; removal once it is not;
  // drain and removal only to whom may.
  function actions(x) {
    if (x.connected) {
      const draining = `${x.draining ? 'DELETE' : 'POST'} /api/v1/executors/{id}/drain`;
      return [
        readiness.get(x.executor_id) || h('button', { type: 'button', 'data-act': 'check', onclick: () => checkReadiness(x.executor_id) }, 'Check'),
        ' ',
        may(draining) && h('button', { type: 'button', 'data-act': 'drain', onclick: () => drain(x.executor_id, !x.draining) }, x.draining ? 'Undrain' : 'Drain'),
      ];
    }
    if (!may('POST /api/v1/executors/{id}/remove')) return readiness.get(x.executor_id) || '';
    if (removing.has(x.executor_id)) {
      return ['Remove it? ', h('button', { type: 'button', class: 'danger', 'data-act': 'remove-confirm', onclick: () => remove(x.executor_id) }, 'Remove'),
        ' ', h('button', { type: 'button', onclick: () => { removing.delete(x.executor_id); load(); } }, 'Cancel')];
    }
    return [readiness.get(x.executor_id) || '', ' ',
      h('button', { type: 'button', 'data-act': 'remove', onclick: () => { removing.add(x.executor_id); load(); } }, 'Remove…')];
  }

  async function checkReadiness(id) {
    say(id, 'asking…');
    load();
    say(id, await askReadiness(id));
    load();
  }

  // One executor's row, keyed: a click on Check or Drain is never lost to a reload under the pointer.
  function executorRow(first) {
    const id = first.executor_id;
    const row = keyedRow({ 'data-executor': id },
      [['name'], ['status'], ['class'], ['caps', 'caps'], ['missions'], ['last'], ['actions', 'actions']]);
    row.update = (x) => {
      row.show('name', `${x.name} ${x.version}`, h('a', { href: `#/executors/${encodeURIComponent(id)}` }, x.name),
        h('div', { class: 'note' }, h('code', { title: id }, shortId(id)), ` · ${x.version}`));
      row.show('status', `${x.connected} ${x.disconnected_at} ${x.draining}`,
        x.connected ? '● connected' : ['○ disconnected ', time(x.disconnected_at)], x.draining ? h('div', { class: 'draining' }, '‖ draining') : '');
      row.show('class', x.capabilities.join(' '), classOf(x.capabilities));
      row.show('caps', x.capabilities.join(' '), x.capabilities.map((c) => h('span', { class: 'chip' }, c)));
      row.show('missions', x.active_mission_count,
        h('a', { href: `#/missions?executor_id=${encodeURIComponent(id)}&state=assigned,running,paused,hitl-required,suspended` }, String(x.active_mission_count)),
        ' · ', h('a', { href: `#/missions?executor_id=${encodeURIComponent(id)}` }, 'all'));
      row.show('last', x.last_event_ts, time(x.last_event_ts));
      row.show('actions', `${x.connected} ${x.draining} ${removing.has(id)} ${said.get(id) || 0}`, actions(x));
    };
    return row;
  }
  const rows = new Map();
  const tbody = h('tbody', {});
  const caption = h('caption', {});
  const listing = h('div', { class: 'scroll' }, h('table', {}, caption,
    h('thead', {}, h('tr', {}, ['Executor', 'Status', 'Class', 'Capabilities', 'Missions', 'Last event', ''].map((t) => h('th', { scope: 'col' }, t)))),
    tbody));
  const none = h('p', {}, 'No executor has registered. Start one: aiwg-serve executor --adapter shell');

  async function load() {
    let list;
    try {
      list = await all('/api/v1/executors', 'executors');
    } catch (e) {
      if (alive && !(e instanceof SignInRequired)) executors.replaceChildren(h('p', { class: 'error', role: 'alert' }, e.message));
      return;
    }
    if (!alive) return;
    // HTTP agent runtimes are registry entries too: they have their own table below.
    const own = list.filter((x) => !x.capabilities.includes('x-kind:http-runtime'));
    syncRows(tbody, rows, own, (x) => x.executor_id, executorRow);
    if (caption.textContent !== `Executors (${own.length})`) caption.textContent = `Executors (${own.length})`;
    const shown = own.length ? listing : none;
    if (executors.firstChild !== shown) executors.replaceChildren(shown);
    const [sb, rt] = await Promise.all([
      api('GET', '/api/v1/sandboxes').catch(() => null),
      api('GET', '/api/v1/runtimes').catch(() => null),
    ]);
    if (!alive) return;
    sandboxes.replaceChildren(sb && sb.ok && sb.data.sandboxes.length ? table(
      'Sandboxes',
      ['Sandbox', 'Status', 'Last event'],
      sb.data.sandboxes.map((s) => h('tr', {}, h('th', { scope: 'row' }, s.sandbox_id, h('div', { class: 'note' }, s.name)),
        h('td', {}, s.connected ? '● connected' : '○ disconnected'),
        h('td', {}, s.last_event_type || '', ' ', time(s.last_event_at)))),
    ) : '');
    runtimes.replaceChildren(rt && rt.ok && rt.data.runtimes.length ? table(
      'HTTP agent runtimes',
      ['Runtime', 'Health', 'Model', 'Active'],
      rt.data.runtimes.map((x) => h('tr', {}, h('th', { scope: 'row' }, x.name, h('div', { class: 'note' }, x.base_url)),
        h('td', {}, x.healthy ? '✓ healthy' : `✗ unhealthy${x.error ? `: ${x.error}` : ''}`, x.draining ? ' · draining' : ''),
        h('td', {}, x.capabilities ? `${x.capabilities.provider_family} ${x.capabilities.model_id}` : ''),
        h('td', {}, String(x.active_mission_count)))),
    ) : '');
  }
  const refresh = throttle(() => load().catch(() => {}), REFRESH_MS);
  refresh();
  // A socket that drops is no event in the log (only its deregistration, after the grace is): the page
  // also looks again every few seconds, so it never offers Drain to an executor that is gone.
  const poll = setInterval(refresh, FLEET_POLL_MS);
  return { onEvent: refresh, refresh, dispose: () => { alive = false; clearInterval(poll); } };
}

// One executor: who it is, what it can do, its readiness, its live and recent missions, drain and remove.
function executorPage(id) {
  const summary = h('dl', { class: 'summary' });
  const controls = h('div', { class: 'controls' });
  const outcome = h('p', { class: 'outcome', role: 'status' });
  const readiness = h('div', { id: 'x-readiness' });
  const liveList = h('div', {});
  const recentList = h('div', {});
  const heading = page(`Executor ${shortId(id)}`, summary, h('section', { 'aria-label': 'Controls' }, controls, outcome),
    h('section', { 'aria-labelledby': 'readiness-h' }, h('h2', { id: 'readiness-h' }, 'Readiness'),
      h('button', { type: 'button', id: 'x-check', onclick: () => check().catch(() => {}) }, 'Check now'), readiness),
    h('section', { 'aria-labelledby': 'live-h' }, h('h2', { id: 'live-h' }, 'Live missions'), liveList),
    h('section', { 'aria-labelledby': 'recent-h' }, h('h2', { id: 'recent-h' }, 'Recent missions'), recentList));
  let alive = true;
  let executorId = id;

  async function act(op, what) {
    const r = await send(op, executorId);
    fill(outcome, r.ok ? `${what}: done` : refusal(what, r));
    refresh();
  }
  async function check() {
    readiness.replaceChildren('asking…');
    readiness.replaceChildren(await askReadiness(executorId));
  }
  const missionList = (missions) => (missions.length ? h('ul', { class: 'missions' }, missions.map((m) => h('li', { 'data-mission': m.mission_id },
    missionLink(m.mission_id), ' ', badge(m.state), ' ', m.objective || '', ' · ', duration(m)))) : h('p', { class: 'note' }, 'None.'));

  async function load() {
    const r = await api('GET', `/api/v1/executors/${encodeURIComponent(id)}`);
    if (!alive) return;
    if (!r.ok) {
      summary.replaceChildren(h('p', { class: 'error', role: 'alert' }, describeError(r)));
      controls.hidden = true;
      return;
    }
    const x = r.data;
    executorId = x.executor_id;
    heading.textContent = `Executor ${x.name}`;
    const rows = [
      ['Name', x.name], ['Id', h('code', {}, x.executor_id)], ['Version', x.version], ['Class', classOf(x.capabilities)],
      ['Capabilities', x.capabilities.map((c) => h('span', { class: 'chip' }, c))],
      ['Status', x.connected ? '● connected' : ['○ disconnected since ', time(x.disconnected_at)]],
      ['Draining', x.draining ? 'yes: no new missions' : ''], ['Registered', time(x.registered_at)],
      ['Last event', time(x.last_event_ts)], ['Active missions', String(x.active_mission_count)],
    ];
    definitions(summary, rows);
    controls.hidden = false;
    const op = x.connected ? `${x.draining ? 'DELETE' : 'POST'} /api/v1/executors/{id}/drain` : 'POST /api/v1/executors/{id}/remove';
    const what = x.connected ? (x.draining ? 'undrain' : 'drain') : 'remove';
    controls.replaceChildren(...(!may(op) ? [] : x.connected
      ? [h('button', { type: 'button', id: 'x-drain', onclick: () => act(op, what) }, x.draining ? 'Undrain' : 'Drain')]
      : [h('button', { type: 'button', id: 'x-remove', class: 'danger', onclick: () => act(op, what) }, 'Remove')]));
    const by = encodeURIComponent(x.executor_id);
    const [live, recent] = await Promise.all([
      api('GET', `/api/v1/missions?executor_id=${by}&state=assigned,running,paused,hitl-required,suspended&limit=50`),
      api('GET', `/api/v1/missions?executor_id=${by}&sort=updated&limit=10`),
    ]);
    if (!alive) return;
    liveList.replaceChildren(live.ok ? missionList(live.data.missions) : refusal('reading', live));
    recentList.replaceChildren(recent.ok ? missionList(recent.data.missions) : refusal('reading', recent));
  }
  const refresh = throttle(() => load().catch(() => {}), REFRESH_MS);
  refresh();
  return {
    onEvent: (item) => { if (item.envelope.executor_id === executorId) refresh(); },
    refresh,
    dispose: () => { alive = false; },
  };
}

// Which form field a schema failure is about, from its path in the body (or, for a missing property,
// the property its message names).
const DISPATCH_FIELDS = [
  ['/objective', 'd-objective'], ['/completion', 'd-completion'], ['/mission_id', 'd-mission'],
  ['/executor_filter/capabilities', 'd-capabilities'], ['/executor_filter/executor_id', 'd-pin'], ['/lease', 'd-tools'],
];

function fieldOf(detail) {
  const named = detail.keyword === 'required' ? `/${(detail.message.match(/"([^"]+)"|'([^']+)'/) || []).slice(1).find(Boolean) || ''}` : '';
  const path = `${detail.instance_path}${named}`;
  const hit = DISPATCH_FIELDS.find(([prefix]) => path === prefix || path.startsWith(`${prefix}/`));
  return hit ? hit[1] : null;
}

// A plan in words: where the dispatch would go, why, and who was passed over and why.
function planView(plan) {
  const who = (c) => (c.name ? `${c.name} (${shortId(c.executor_id)})` : shortId(c.executor_id));
  if (plan.outcome === 'assign') {
    const passed = plan.routing.rejected || [];
    return h('div', { 'data-plan': 'assign' },
      h('p', {}, 'Would be assigned to ', h('strong', {}, plan.candidates.map(who).join(', then ')), '.'),
      h('p', { class: 'note' }, plan.routing.reason),
      passed.length ? h('ul', { class: 'rejected' }, passed.map((r) => h('li', {}, h('strong', {}, who(r)), `: ${r.reason}`))) : null);
  }
  if (plan.outcome === 'queue') return h('p', { 'data-plan': 'queue' }, `Would wait in the queue: ${plan.queued_reason}`);
  return h('p', { class: 'error', 'data-plan': 'refuse' }, `Would be refused: ${plan.error.message} (${plan.error.code})`);
}

// Dispatch: a plan before sending, errors beside the fields they are about, and the new mission
// followed live until it ends.
function dispatchPage(params) {
  if (!may('POST /api/v1/sessions/{id}/dispatch')) {
    page('Dispatch a mission', h('p', { class: 'note', id: 'dispatch-result' }, `Dispatching needs the operator role; ${me.name} is a ${me.role}.`));
    return { onEvent: () => {}, refresh: () => {}, dispose: () => {} };
  }
  const session = h('input', { type: 'text', value: 'dashboard', required: true });
  const missionId = h('input', { type: 'text', value: newMissionId(), required: true, pattern: '[A-Za-z0-9][A-Za-z0-9._:\\-]{0,127}' });
  const objective = h('textarea', { rows: '4', required: true });
  const completion = h('input', { type: 'text', value: 'the objective is met', required: true });
  const capabilities = h('input', { type: 'text', placeholder: 'e.g. isolation:container, runtime:claude-code' });
  const pin = h('input', { type: 'text', placeholder: 'any executor' });
  const tools = h('input', { type: 'text', placeholder: 'e.g. Bash, or Read,Edit,Bash' });
  const longRunning = h('input', { type: 'checkbox' });
  const unattended = h('input', { type: 'checkbox' });
  const queue = h('input', { type: 'checkbox' });
  const result = h('div', { class: 'outcome', role: 'status', id: 'dispatch-result' });
  const check = (label, id, input) => h('div', { class: 'check' }, input, h('label', { for: id }, label));
  longRunning.id = 'd-long';
  unattended.id = 'd-unattended';
  queue.id = 'd-queue';
  const list = (input) => input.value.split(',').map((s) => s.trim()).filter(Boolean);
  let followed = null;

  function body() {
    const b = { mission_id: missionId.value.trim(), objective: objective.value, completion: completion.value };
    const filter = {};
    if (list(capabilities).length) filter.capabilities = list(capabilities);
    if (pin.value.trim()) filter.executor_id = pin.value.trim();
    if (Object.keys(filter).length) b.executor_filter = filter;
    if (longRunning.checked) b.long_running = true;
    if (unattended.checked) b.unattended = true;
    if (queue.checked) b.queue = true;
    if (tools.value.trim()) b.lease = { tools: tools.value.trim() === 'none' ? 'none' : list(tools) };
    return b;
  }

  // The API's schema failures, each beside its field (the rest in the result).
  function showErrors(r) {
    for (const el of form.querySelectorAll('.field-error')) el.remove();
    for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
    const unplaced = [];
    for (const d of (r && r.data && r.data.details) || []) {
      const input = fieldOf(d) && document.getElementById(fieldOf(d));
      if (!input) { unplaced.push(d); continue; }
      const note = h('p', { class: 'field-error error', id: `${input.id}-error` }, d.message);
      input.setAttribute('aria-invalid', 'true');
      input.setAttribute('aria-describedby', note.id);
      input.parentElement.append(note);
    }
    return unplaced;
  }

  async function plan() {
    showErrors(null);
    result.replaceChildren('planning…');
    const r = await api('POST', '/api/v1/dispatch/plan', body());
    result.dataset.status = String(r.status);
    if (r.ok) result.replaceChildren(planView(r.data));
    else notDispatched(r, 'Not planned');
    result.scrollIntoView({ block: 'nearest' });
  }

  function notDispatched(r, what) {
    const rest = showErrors(r);
    result.replaceChildren(h('p', { class: 'error' }, `${what}: ${describeError(r)}`),
      rest.length ? h('ul', {}, rest.map((d) => h('li', {}, `${d.instance_path || 'body'}: ${d.message}`))) : null);
  }

  async function submit(e) {
    e.preventDefault();
    showErrors(null);
    result.replaceChildren('dispatching…');
    const r = await api('POST', `/api/v1/sessions/${encodeURIComponent(session.value.trim())}/dispatch`, body());
    const d = r.data || {};
    result.dataset.status = String(r.status);
    if (!r.ok) return notDispatched(r, 'Not dispatched');
    followed = { id: d.mission_id, badge: h('span', { 'data-follow': d.mission_id }, badge(d.status)) };
    const where = d.status === 'assigned'
      ? ['Assigned to ', h('strong', { title: d.executor_id }, d.executor_id), '. ']
      : [`Queued: ${d.queued_reason}. `];
    result.replaceChildren(h('p', {}, ...where, missionLink(d.mission_id), ' ', followed.badge));
    if (r.warning) result.append(h('ul', {}, h('li', {}, r.warning)));
    missionId.value = newMissionId();
    result.scrollIntoView({ block: 'nearest' });
  }

  // The form as mission `from` was asked (objective, completion, filter, lease, flags), under a new id.
  async function prefill(from) {
    const r = await api('GET', `/api/v1/missions/${encodeURIComponent(from)}`);
    if (!r.ok) { result.replaceChildren(h('p', { class: 'error' }, `Cannot copy ${from}: ${describeError(r)}`)); return; }
    const m = r.data;
    objective.value = m.objective || '';
    completion.value = m.completion || '';
    session.value = m.session_id || session.value;
    const filter = m.executor_filter || {};
    capabilities.value = (filter.capabilities || []).join(', ');
    pin.value = filter.executor_id || '';
    const leased = m.lease && m.lease.tools;
    tools.value = Array.isArray(leased) ? leased.join(', ') : leased || '';
    result.replaceChildren(h('p', { class: 'note' }, 'Copied from ', missionLink(from), '; check it, then Plan or Dispatch.'));
  }

  // The mission just dispatched, followed: its state as it moves, and its error if it fails.
  function follow(item) {
    if (!followed || item.envelope.mission_id !== followed.id) return;
    const state = (item.envelope.data && item.envelope.data.state) || item.envelope.event.replace('mission.', '');
    if (!STATES.includes(state)) return;
    const error = item.envelope.data && (item.envelope.data.error || item.envelope.data.reason);
    fill(followed.badge, badge(state), ['failed', 'aborted'].includes(state) && error ? ` ${error}` : '');
  }

  const form = h(
    'form',
    { class: 'card dispatch', onsubmit: submit },
    field('Objective', 'd-objective', objective),
    field('Completion (how the executor knows it is done)', 'd-completion', completion),
    field('Session', 'd-session', session),
    field('Mission id', 'd-mission', missionId),
    field('Capabilities required (comma-separated)', 'd-capabilities', capabilities),
    field('Pin to executor (id)', 'd-pin', pin),
    field('Lease tools (comma-separated allowlist, or none; empty sends no lease)', 'd-tools', tools),
    check('Long-running (resumable executors only)', 'd-long', longRunning),
    check('Unattended (nobody will answer a prompt)', 'd-unattended', unattended),
    check('Queue when no executor fits now', 'd-queue', queue),
    h('div', { class: 'buttons' },
      may('POST /api/v1/dispatch/plan') && h('button', { type: 'button', class: 'plan', onclick: () => plan().catch(() => {}) }, 'Plan'),
      h('button', { type: 'submit' }, 'Dispatch')),
  );
  page('Dispatch a mission', form, result);
  if (params && params.get('from')) prefill(params.get('from')).catch(() => {});
  return { onEvent: follow, refresh: () => {}, dispose: () => {} };
}

// The events page's rows are one line each, this high (style.css holds them to it), so that which rows
// are in view follows from the scroll position alone: only those (and EVENT_OVERSCAN on either side, so
// that a quick scroll shows no blank) are in the document, whatever the number of events kept. Under a
// stream of thousands of events a second the page adds them once per animation frame, and a frame
// touches a few dozen rows, not hundreds.
const EVENT_ROW_PX = 28;
const EVENT_OVERSCAN = 6;
// New events redraw the rows at most this often (a scroll redraws at once): at thousands of events a
// second every frame replaced every row in view, and a run still had a 66 ms frame with no long task
// (aiwg-bench --only dashboard, 40 events/s from 64 executors); nobody reads faster than this.
const EVENT_DRAW_MS = 100;

// The events page's filter: comma-separated starts of event types to show, a written -start left out;
// an executor by name or id's start; a mission by its id's start; progress hidden.
function eventFilter(type, executor, mission, hideProgress) {
  const rules = type.value.split(',').map((r) => r.trim()).filter(Boolean);
  const shown = rules.filter((r) => !r.startsWith('-'));
  const left = rules.filter((r) => r.startsWith('-')).map((r) => r.slice(1)).filter(Boolean);
  const [who, which, noProgress] = [executor.value.trim(), mission.value.trim(), hideProgress.checked];
  return (item) => {
    const e = item.envelope;
    return !(noProgress && e.event === 'mission.progress')
      && (!shown.length || shown.some((r) => e.event.startsWith(r)))
      && !left.some((r) => e.event.startsWith(r))
      && (!who || e.executor_id.startsWith(who) || executorNames.get(e.executor_id) === who)
      && (!which || (e.mission_id || '').startsWith(which));
  };
}

// The live log, newest first, filtered on the page; one event's data shown on demand above the list.
function eventsPage() {
  const type = h('input', { type: 'text', placeholder: 'e.g. mission.failed, -mission.progress' });
  const executor = h('input', { type: 'text', placeholder: 'name or id' });
  const mission = h('input', { type: 'text', placeholder: 'id or its start' });
  const hideProgress = h('input', { type: 'checkbox', id: 'e-no-progress' });
  const paused = h('p', { class: 'note', id: 'events-paused', hidden: true });
  const pause = h('button', { type: 'button', id: 'events-pause', onclick: () => togglePause() }, 'Pause');
  // Disabled while the backlog or a page of history is read: two reads from the same oldest event
  // would show its page twice.
  const older = h('button', { type: 'button', id: 'events-older', disabled: true, 'data-state': 'reading',
    onclick: () => readOlder().catch(() => {}) }, 'Older events');
  const olderSaid = h('span', {});
  const olderReady = (more) => {
    older.disabled = !more;
    older.dataset.state = more ? 'idle' : 'done';
    if (!more) older.textContent = 'The beginning of the log';
  };
  const detail = h('section', { class: 'card event-detail', id: 'event-detail', hidden: true, 'aria-label': 'The event\'s data' });
  const list = h('ol', { class: 'events', id: 'events', reversed: true });
  const viewport = h('div', { class: 'events-view', id: 'events-view', tabindex: '0', 'aria-label': 'Events, newest first' }, list);
  const gone = h('p', { class: 'note', id: 'events-compacted', hidden: true });
  const sayCompacted = () => {
    gone.hidden = compactedBefore === 0;
    gone.textContent = `Events up to ${compactedBefore} were compacted away (retention); a mission's page `
      + 'still shows what its history kept.';
  };
  // Every event kept, oldest first; those the filter shows (drawn newest at the top); the rows drawn.
  const kept = [];
  let matching = [];
  const drawn = new Map();
  let matches = eventFilter(type, executor, mission, hideProgress);
  // How many events the page keeps: the live window, plus the history the operator asked for.
  let cap = EVENTS_KEPT;
  let held = 0;
  let alive = true;
  // What arrived since the last frame, and how many rows were added above a view scrolled down (kept
  // in place: what the operator reads does not slide away).
  const pending = [];
  let above = 0;
  let frame = 0;
  let drawnAt = 0;
  let scrolled = false;
  const schedule = () => { if (!frame && alive) frame = requestAnimationFrame(flush); };

  function flush(now) {
    frame = 0;
    if (pending.length) take(pending.splice(0));
    if (!scrolled && now - drawnAt < EVENT_DRAW_MS) { schedule(); return; }
    scrolled = false;
    drawnAt = now;
    draw();
  }

  function take(items) {
    let names = false;
    for (const incoming of items) {
      if (kept.length && incoming.seq <= kept[kept.length - 1].seq) continue;
      const item = slim(incoming);
      kept.push(item);
      if (kept.length > cap && kept.shift() === matching[0]) matching.shift();
      names ||= item.envelope.event.startsWith('executor.');
      // Paused: kept, not shown, until the operator resumes.
      if (pause.dataset.paused) held += 1;
      else if (matches(item)) { matching.push(item); above += 1; }
    }
    if (names) readExecutorNames().catch(() => {});
    if (held) paused.textContent = `Paused: ${held} new event${held === 1 ? '' : 's'} not shown yet.`;
  }

  // The rows in view, in order, each made once (keyed by sequence); the list as tall as all of them.
  function draw() {
    const n = matching.length;
    list.style.height = `${n * EVENT_ROW_PX}px`;
    list.dataset.count = String(n);
    if (above && viewport.scrollTop > 0) viewport.scrollTop += above * EVENT_ROW_PX;
    above = 0;
    const first = Math.max(0, Math.floor(viewport.scrollTop / EVENT_ROW_PX) - EVENT_OVERSCAN);
    const last = Math.min(n, Math.ceil((viewport.scrollTop + viewport.clientHeight) / EVENT_ROW_PX) + EVENT_OVERSCAN);
    const inView = [];
    for (let i = first; i < last; i += 1) inView.push(matching[n - 1 - i]);
    list.style.paddingTop = `${first * EVENT_ROW_PX}px`;
    syncRows(list, drawn, inView, (item) => item.seq, (item) => eventRow(item, showData));
  }

  // Everything again: the filter changed, the page resumed, history or names came in.
  function redraw() {
    matches = eventFilter(type, executor, mission, hideProgress);
    matching = kept.filter(matches);
    above = 0;
    drawn.clear();
    list.replaceChildren();
    draw();
  }

  function showData(item) {
    const e = item.envelope;
    fill(detail, h('h2', {}, `#${item.seq} ${e.event}`, ' ', byLabel(item), e.mission_id ? [' on ', missionLink(e.mission_id)] : ''),
      h('pre', {}, shown(e.data)),
      h('button', { type: 'button', onclick: () => { detail.hidden = true; } }, 'Close'));
    detail.hidden = false;
  }

  function togglePause() {
    if (pause.dataset.paused) {
      delete pause.dataset.paused;
      pause.textContent = 'Pause';
      paused.hidden = true;
      held = 0;
      redraw();
    } else {
      pause.dataset.paused = 'yes';
      pause.textContent = 'Resume';
      paused.hidden = false;
      paused.textContent = 'Paused: no new event yet.';
    }
  }
  // A page of history before the oldest event kept (the server's `before`), progress left out when
  // it is hidden.
  async function readOlder() {
    older.disabled = true;
    older.dataset.state = 'reading';
    const oldest = kept.length ? kept[0].seq : live.since + 1;
    const q = { follow: 'false', before: String(oldest), limit: '200', max_bytes: String(TIMELINE_PAGE_BYTES) };
    if (hideProgress.checked) q.progress = 'false';
    const r = await api('GET', `/api/v1/events?${new URLSearchParams(q)}`);
    if (!alive) return;
    fill(olderSaid, !r.ok && refusal('reading', r));
    if (!r.ok) { olderReady(true); return; }
    const page = r.data.events.filter((e) => !kept.length || e.seq < kept[0].seq).map(slim);
    kept.unshift(...page);
    cap += page.length;
    redraw();
    olderReady(r.data.older);
  }
  page(
    'Events',
    h(
      'form',
      { class: 'filters', role: 'search', oninput: redraw, onsubmit: (e) => e.preventDefault() },
      field('Types (starts; -type leaves out)', 'e-type', type),
      field('Executor', 'e-executor', executor),
      field('Mission', 'e-mission', mission),
      h('div', { class: 'check' }, hideProgress, h('label', { for: 'e-no-progress' }, 'Hide mission.progress')),
      pause,
    ),
    h('p', { class: 'note' }, `The last ${EVENTS_KEPT} events, newest first, live; older ones on demand below; a row's data on a click.`),
    paused,
    gone,
    detail,
    viewport,
    h('div', { class: 'pager' }, older, olderSaid),
  );
  viewport.addEventListener('scroll', () => { scrolled = true; schedule(); }, { passive: true });
  // Rows say who did what by name: drawn again once the names are in.
  readExecutorNames().then(() => { if (alive) redraw(); }).catch(() => {});
  // The last 200 sequence numbers of the log, in pages of bounded size.
  async function backlog() {
    const read = (since, limit) => {
      const q = { follow: 'false', since: String(since), limit: String(limit), max_bytes: String(TIMELINE_PAGE_BYTES) };
      return api('GET', `/api/v1/events?${new URLSearchParams(q)}`);
    };
    let r = await read(Math.max(0, live.since - 200, compactedBefore), 200);
    // Part of the last 200 was compacted away: the backlog starts at the first event still kept.
    if (r.status === 410 && Number.isInteger(r.data.resume_since)) {
      compactedBefore = Math.max(compactedBefore, r.data.resume_since);
      r = await read(compactedBefore, 200);
    }
    const got = [];
    for (;;) {
      if (!alive) return;
      if (!r.ok) { fill(olderSaid, refusal('reading', r)); olderReady(true); return; }
      got.push(...r.data.events.map(slim));
      if (!r.data.more || got.length >= 200) break;
      r = await read(r.data.next_since, 200 - got.length);
    }
    sayCompacted();
    // Live items that arrived while this read was in flight are newer: keep the order by sequence.
    const newer = kept.splice(0);
    for (const item of [...got, ...newer]) {
      if (!kept.length || item.seq > kept[kept.length - 1].seq) kept.push(item);
    }
    redraw();
    // Older events may precede the backlog unless it starts at the log's first; the server says.
    olderReady(!got.length || got[0].seq > 1);
  }
  backlog().catch(() => olderReady(true));
  return {
    // A tab in the background gets no animation frames: what arrives is taken in without drawing
    // once it would fill the page, so that it waits in memory bounded by what the page keeps.
    onEvent: (item) => {
      pending.push(item);
      if (pending.length >= cap) take(pending.splice(0));
      schedule();
    },
    refresh: sayCompacted,
    dispose: () => { alive = false; if (frame) cancelAnimationFrame(frame); },
  };
}

// ---------------------------------------------------------------------------------------------------
// Notifications: a question that arrives while the tab is in the background reaches the operator at
// once. The browser's permission is asked once, on the operator's click (browsers ignore a request
// nobody clicked for); the prompt is shown as the notification's text, which browsers never render as
// markup.

// Usage: what missions spent, from the sums serve keeps (`GET /api/v1/usage`), by day, operator,
// executor and model, with a chart of each day's cost (its tokens where nothing is priced).
const USAGE_BY = [['day', 'By day'], ['operator', 'By operator'], ['executor', 'By executor'], ['model', 'By model']];

function usagePage(params) {
  const since = h('input', { type: 'date', value: params.get('since') || '' });
  const form = h('form', {
    class: 'filters',
    onsubmit: (e) => { e.preventDefault(); location.hash = `#/usage${since.value ? `?since=${since.value}` : ''}`; },
  }, field('Since (UTC day)', 'usage-since', since), h('button', { type: 'submit' }, 'Show'));
  const total = h('p', { id: 'usage-total' });
  const chart = h('figure', { class: 'chart', id: 'usage-chart' });
  const sections = USAGE_BY.map(([by]) => h('section', { 'data-usage': by }));
  const status = h('p', { role: 'status', class: 'note' });
  const budgets = h('section', { id: 'usage-budgets' });
  page('Usage', form, status, total, chart, budgets, ...sections);
  let alive = true;
  const refresh = throttle(async () => {
    const q = since.value ? `&since=${encodeURIComponent(since.value)}` : '';
    const answers = await Promise.all(USAGE_BY.map(([by]) => api('GET', `/api/v1/usage?by=${by}${q}`).catch(() => null)));
    const standing = await api('GET', '/api/v1/budgets').catch(() => null);
    if (!alive) return;
    fill(budgets, ...budgetsTable(standing));
    const failed = answers.findIndex((r) => !r || !r.ok);
    const refused = answers[failed];
    fill(status, failed < 0 ? '' : refused ? describeError(refused) : 'serve does not answer');
    if (failed >= 0) return;
    const [byDay] = answers;
    fill(total, h('b', {}, 'Total: '), tokensText(byDay.data.total), costText(byDay.data.total) ? `; ${costText(byDay.data.total)}` : '');
    fill(chart, usageChart(byDay.data.groups));
    answers.forEach((r, i) => {
      const [by, title] = USAGE_BY[i];
      const rows = r.data.groups.map((g) => h('tr', { 'data-key': g.key },
        h('th', { scope: 'row' }, by === 'executor' && g.name ? h('span', { title: g.key }, g.name) : g.key || '(unknown)'),
        [g.input_tokens, g.output_tokens, g.cache_read_input_tokens + g.cache_creation_input_tokens, g.reasoning_output_tokens]
          .map((n) => h('td', {}, n.toLocaleString('en-US'))),
        h('td', { class: 'cost' }, costText(g))));
      fill(sections[i], h('h2', {}, title), rows.length
        ? table(since.value ? `From ${since.value} (UTC)` : 'Every day kept',
          [by[0].toUpperCase() + by.slice(1), 'Input', 'Output', 'Cached', 'Reasoning', 'Cost'], rows)
        : h('p', { class: 'note' }, 'Nothing reported.'));
    });
  }, REFRESH_MS);
  refresh();
  return {
    // Usage comes with a mission's progress and end.
    onEvent: (item) => { if (item.envelope.mission_id) refresh(); },
    refresh,
    dispose: () => { alive = false; },
  };
}

// A mission's budget in one line: each limit, what warned, and what ran out.
function budgetText(b) {
  const limits = [
    b.max_tokens !== undefined && `${b.max_tokens.toLocaleString('en-US')} tokens`,
    b.max_cost_usd !== undefined && `$${b.max_cost_usd.toFixed(2)}`,
    b.max_duration_s !== undefined && `${b.max_duration_s} s`,
  ].filter(Boolean);
  const warned = b.warned.length ? `; 80% of ${b.warned.join(', ')} reached` : '';
  const out = b.exhausted ? `; ${b.exhausted} exhausted` : '';
  return `${limits.join(', ')} (then ${b.on_exhausted})${warned}${out}`;
}

// The standing budgets with their period's spend (admins read them; others are told so).
function budgetsTable(r) {
  const title = h('h2', {}, 'Standing budgets');
  if (!r) return [title, h('p', { class: 'note' }, 'serve does not answer')];
  if (!r.ok) return [title, h('p', { class: 'note' }, r.status === 403 ? 'Standing budgets are shown to admins.' : describeError(r))];
  if (!r.data.budgets.length) return [title, h('p', { class: 'note' }, 'None: add [[budgets]] to the configuration, or POST /api/v1/budgets.')];
  const spent = (used, max, show) => (max === undefined ? show(used) : `${show(used)} of ${show(max)}`);
  const rows = r.data.budgets.map((b) => h('tr', { 'data-budget': b.id, class: b.exhausted ? 'exhausted' : '' },
    h('th', { scope: 'row' }, b.id), h('td', {}, b.scope), h('td', {}, b.period),
    h('td', {}, spent(b.spent_tokens, b.max_tokens, (n) => n.toLocaleString('en-US'))),
    h('td', { class: 'cost' }, spent(b.spent_cost_usd, b.max_cost_usd, (d) => `$${d.toFixed(2)}`)),
    h('td', {}, b.resets_at), h('td', {}, b.exhausted ? `exhausted (${b.exhausted})` : 'ok')));
  return [title, table('This period', ['Budget', 'Scope', 'Period', 'Tokens', 'Cost', 'Resets', 'State'], rows)];
}

// An SVG bar a day (attributes, never inline styles: the page's CSP allows none): each day's cost, or
// its tokens when nothing of the days is priced; the value on hover and as the bar's label.
function usageChart(days) {
  const priced = days.some((d) => d.cost_usd !== undefined);
  const value = (d) => (priced ? d.cost_usd || 0 : d.input_tokens + d.output_tokens);
  const label = (d) => (priced ? costText(d) || 'unpriced' : `${value(d).toLocaleString('en-US')} tokens`);
  const most = Math.max(1, ...days.map(value));
  // A fortnight's room at least, so that a few days are bars, not blocks.
  const [bar, height, gap] = [28, 120, 4];
  const width = Math.max(14, days.length) * bar;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = (tag, attrs, ...children) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    el.append(...children);
    return el;
  };
  const bars = days.map((d, i) => {
    const tall = Math.round((value(d) / most) * (height - 4));
    return svg('rect', { x: i * bar + gap / 2, y: height - tall, width: Math.max(1, bar - gap), height: tall, class: 'bar', 'data-day': d.key },
      svg('title', {}, `${d.key}: ${label(d)}`));
  });
  const caption = h('figcaption', { class: 'note' }, days.length
    ? `${priced ? 'Cost' : 'Tokens'} per day, ${days[0].key} to ${days[days.length - 1].key}`
    : 'No usage reported in this time.');
  return [svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': caption.textContent, class: 'bars', preserveAspectRatio: 'xMinYMax meet' }, ...bars), caption];
}

function offerNotifications() {
  notifyButton.hidden = !('Notification' in window) || Notification.permission !== 'default';
}

notifyButton.addEventListener('click', async () => {
  await Notification.requestPermission();
  offerNotifications();
});

function notifyQuestion(item) {
  const e = item.envelope;
  if (e.event !== 'mission.hitl_required' || !('Notification' in window)) return;
  if (Notification.permission !== 'granted' || (document.visibilityState === 'visible' && document.hasFocus())) return;
  const data = e.data || {};
  const n = new Notification(`A question on mission ${e.mission_id}`, { body: String(data.prompt ?? ''), tag: `hitl-${e.mission_id}` });
  n.onclick = () => { window.focus(); location.hash = `#/missions/${encodeURIComponent(e.mission_id)}`; n.close(); };
}

// The inbox: the questions agents wait on, across missions, oldest first, each answerable in place.
function inboxPage() {
  let alive = true;
  const answering = may('POST /api/v1/missions/{id}/hitl_response');
  const empty = h('p', { class: 'note' });
  const requests = table('Pending HITL requests', ['Mission', 'Executor', 'Asked', 'Waited', 'Question', answering && 'Answer'].filter(Boolean), []);
  const body = requests.querySelector('tbody');
  const rows = new Map();
  const note = answering ? 'Questions agents wait on, oldest first.' : `Questions agents wait on, oldest first. An operator answers them; ${me.name} is a ${me.role}.`;
  const failed = h('p', {});
  page('Inbox', h('p', { class: 'note' }, note), failed, empty, requests);
  const refresh = throttle(async () => {
    const r = await api('GET', '/api/v1/hitl?limit=500').catch(() => null);
    if (!alive || !r) return;
    fill(failed, !r.ok && refusal('reading', r));
    if (!r.ok) return;
    fill(empty, r.data.requests.length ? '' : 'Nothing waits for an answer.');
    // Rows are kept while their question waits: an answer being typed, or a refusal said, survives
    // the other questions' changes.
    syncRows(body, rows, r.data.requests, (q) => q.hitl_id, (q) => inboxRow(q, answering, refresh));
  }, REFRESH_MS);
  refresh();
  return {
    // A question asked, answered, expired or withdrawn with its mission's end: any mission's event.
    onEvent: (item) => { if (item.envelope.mission_id) refresh(); },
    refresh,
    dispose: () => { alive = false; },
  };
}

function inboxRow(q, answering, refresh) {
  const answer = h('input', { type: 'text', 'aria-label': `Answer to ${q.hitl_id}`, required: true });
  const status = h('span', { class: 'note', role: 'status' });
  const form = h('form', {
    class: 'answer',
    onsubmit: async (ev) => {
      ev.preventDefault();
      const r = await send('POST /api/v1/missions/{id}/hitl_response', q.mission_id, { hitl_id: q.hitl_id, response: answer.value });
      fill(status, r.ok ? 'answered' : refusal('answer', r));
      if (r.ok) refresh();
    },
  }, answer, h('button', { type: 'submit' }, 'Answer'), status);
  const waited = h('td', {});
  const row = h(
    'tr',
    { 'data-mission': q.mission_id, 'data-hitl': q.hitl_id },
    h('td', {}, missionLink(q.mission_id)),
    h('td', {}, q.executor_name || q.executor_id || ''),
    h('td', {}, time(q.requested_at)),
    waited,
    h('td', {}, q.prompt, q.context ? h('div', { class: 'note' }, q.context) : ''),
    answering && h('td', {}, form),
  );
  row.update = () => {
    const s = Math.max(0, Math.round((Date.now() - new Date(q.requested_at).getTime()) / 1000));
    waited.textContent = `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  };
  return row;
}

// The audit trail (admins): every state-changing operator call, refused ones too, newest first: when,
// who as what, the call, what it acted on, how it ended, from where. Filters as the API's, pages of 50.
const AUDIT_FILTERS = [['operator', 'Operator', 'a name'], ['mission_id', 'Mission', 'whole id'], ['executor_id', 'Executor', 'whole id']];
// What the page shows in columns of their own; anything else a record carries is said beside its call.
const AUDIT_SHOWN = new Set(['seq', 'at', 'operator', 'role', 'source', 'method', 'route', 'target', 'mission_id', 'executor_id', 'status', 'outcome', 'count']);

function auditRow(rec) {
  const who = rec.operator ? [rec.operator, h('span', { class: 'note' }, ` ${rec.role || ''}`)]
    : h('span', { class: 'note' }, `no valid operator token${rec.count > 1 ? ` × ${rec.count}` : ''}`);
  const more = Object.entries(rec).filter(([k, v]) => !AUDIT_SHOWN.has(k) && v !== null && v !== undefined)
    .map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' · ');
  const executor = rec.executor_id && h('a', { href: `#/executors/${encodeURIComponent(rec.executor_id)}`, title: rec.executor_id },
    executorNames.get(rec.executor_id) || shortId(rec.executor_id));
  return h('tr', { 'data-seq': rec.seq, 'data-outcome': rec.outcome },
    h('td', { class: 'when' }, ago(rec.at)),
    h('td', {}, who),
    h('td', { class: 'clip call', title: more }, h('code', {}, `${rec.method} ${rec.route}`), more && h('span', { class: 'note' }, ` ${more}`)),
    h('td', { class: 'clip', title: rec.target || '' }, rec.target || ''),
    h('td', {}, rec.mission_id && h('a', { href: `#/missions/${encodeURIComponent(rec.mission_id)}`, title: rec.mission_id, class: 'id' }, shortId(rec.mission_id))),
    h('td', {}, executor),
    h('td', { class: rec.status >= 400 ? 'error' : '' }, `${rec.status} ${rec.outcome}`),
    h('td', { class: 'note' }, rec.source || ''));
}

function auditPage(params) {
  const filters = {};
  for (const k of [...AUDIT_FILTERS.map(([k]) => k), 'since']) if (params.get(k)) filters[k] = params.get(k);
  const inputs = AUDIT_FILTERS.map(([k, , hint]) => h('input', { type: 'text', value: filters[k] || '', placeholder: hint }));
  const since = h('input', { type: 'datetime-local', value: filters.since ? toLocalInput(filters.since) : '' });
  const form = h('form', {
    class: 'filters',
    role: 'search',
    onsubmit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      AUDIT_FILTERS.forEach(([k], i) => { if (inputs[i].value.trim()) q.set(k, inputs[i].value.trim()); });
      if (since.value) q.set('since', fromLocalInput(since.value));
      location.hash = `#/audit?${q}`;
    },
  }, AUDIT_FILTERS.map(([k, label], i) => field(label, `a-${k}`, inputs[i])), field('Since', 'a-since', since),
  h('button', { type: 'submit' }, 'Filter'));
  const status = h('p', { role: 'status' });
  const trail = table('Every state-changing operator call, refused ones too, newest first',
    ['When', 'Operator', 'Call', 'Target', 'Mission', 'Executor', 'Answer', 'From'], []);
  const tbody = trail.querySelector('tbody');
  const cursors = [null];
  const turn = (step) => { step(); load(); };
  const newer = h('button', { type: 'button', onclick: () => turn(() => cursors.pop()) }, '← Newer');
  const older = h('button', { type: 'button', onclick: () => turn(() => cursors.push(older.dataset.cursor)) }, 'Older →');
  page('Audit', form, h('div', { class: 'batch' }, status, h('div', { class: 'pager' }, newer, older)), trail);
  tbody.parentElement.classList.add('audit');
  let alive = true;
  async function load() {
    const q = new URLSearchParams({ ...filters, limit: '50' });
    const cursor = cursors[cursors.length - 1];
    if (cursor) q.set('cursor', cursor);
    const r = await api('GET', `/api/v1/audit?${q}`);
    if (!alive) return;
    fill(status, !r.ok && refusal('reading the audit trail', r));
    if (!r.ok) return;
    fill(tbody, r.data.records.length ? r.data.records.map(auditRow) : h('tr', {}, h('td', { colspan: '8', class: 'note' }, 'No call recorded.')));
    newer.disabled = cursors.length === 1;
    older.disabled = !r.data.next_cursor;
    if (r.data.next_cursor) older.dataset.cursor = r.data.next_cursor;
  }
  // Calls change missions and executors: the first page is read again as their events arrive.
  const refresh = throttle(() => { if (cursors.length === 1) load().catch(() => {}); }, 1000);
  readExecutorNames().catch(() => {}).then(() => load()).catch(() => {});
  return { onEvent: refresh, refresh, dispose: () => { alive = false; } };
}

// ---------------------------------------------------------------------------------------------------
// Routing between pages (in the fragment, so that serve needs one page) and the start.

function route() {
  if (!live.running) return;
  const [path, query] = (location.hash || '#/missions').slice(1).split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean);
  if (current) current.dispose();
  const name = parts[0] || 'missions';
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.page === (name === 'executors' ? 'fleet' : name)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (name === 'missions' && parts[1]) current = missionPage(decodeURIComponent(parts[1]));
  else if (name === 'fleet') current = fleetPage();
  else if (name === 'executors' && parts[1]) current = executorPage(decodeURIComponent(parts[1]));
  else if (name === 'dispatch') current = dispatchPage(params);
  else if (name === 'events') current = eventsPage();
  else if (name === 'inbox') current = inboxPage();
  else if (name === 'usage') current = usagePage(params);
  else if (name === 'audit') current = auditPage(params);
  else current = missionsPage(params);
  const heading = view.querySelector('h1');
  if (heading && document.activeElement !== document.body) heading.focus();
}

live.listeners.add((item) => {
  notifyQuestion(item);
  refreshOverview();
  if (current) current.onEvent(item);
});

async function boot() {
  let r;
  let w;
  try {
    [r, w] = await Promise.all([api('GET', '/api/v1/overview'), api('GET', '/api/v1/whoami')]);
  } catch (e) {
    if (e instanceof SignInRequired) return;
    setLive('offline', 'serve does not answer; retrying');
    await sleep(2000);
    boot();
    return;
  }
  if (!r.ok || !w.ok) {
    view.replaceChildren(h('p', { class: 'error', role: 'alert' }, describeError(r.ok ? w : r)));
    return;
  }
  me = { name: w.data.name, role: w.data.role, may: new Set(w.data.may) };
  renderIdentity();
  signingIn = false;
  signOutButton.hidden = !sessionStorage.getItem(TOKEN_KEY);
  offerNotifications();
  renderOverview(r.data);
  live.start(r.data.last_seq);
  route();
}

window.addEventListener('hashchange', route);
boot();
