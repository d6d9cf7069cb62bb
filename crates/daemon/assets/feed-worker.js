// One /live stream shared by every tab of the dashboard: a browser opens at most six
// connections to a host over HTTP/1.1, and each tab holding its own stream would use them up.
// The stream says which runs changed status (`run` messages); each tab decides what that
// changes on its page. A tab that joins later than the position its page was rendered at is
// given the messages it missed from a ring of the recent ones, or told it is stale when the
// ring no longer holds them all. A message is given to a tab only when it is newer than what
// the tab's page shows: a stream behind a burst of runs (one written straight to the journal)
// must not tell a page that rendered them that they are new.
// Each tab's port, with the feed position its page shows (none before it says hello).
const ports = new Map();
const NONE_YET = Number.MAX_SAFE_INTEGER;
let source = null;
let state = 'offline';
// The feed position the stream started after, and the recent messages: {id, data}.
let openedAfter = 0;
const ring = [];
const RING = 1000;
// The position of the newest message dropped from the ring.
let dropped = 0;

function broadcast(message) {
  for (const port of ports.keys()) port.postMessage(message);
}

// A run's change at feed position `id`, to the tabs whose pages show less.
function tell(id, data) {
  for (const [port, after] of ports) if (id > after) port.postMessage({ type: 'run', data });
}

function open(after) {
  openedAfter = Number(after) || 0;
  source = new EventSource(`/live?after=${encodeURIComponent(after)}`);
  source.onopen = () => { state = 'live'; broadcast({ type: 'state', state }); };
  source.onerror = () => { state = 'offline'; broadcast({ type: 'state', state }); };
  source.addEventListener('run', (e) => {
    const id = Number(e.lastEventId) || 0;
    ring.push({ id, data: e.data });
    if (ring.length > RING) dropped = ring.shift().id;
    tell(id, e.data);
  });
  // The badge's count after a burst of changes.
  source.addEventListener('count', (e) => broadcast({ type: 'count', data: e.data }));
}

onconnect = (e) => {
  const port = e.ports[0];
  ports.set(port, NONE_YET);
  port.onmessage = (m) => {
    if (m.data.type === 'hello') {
      const after = Number(m.data.after) || 0;
      ports.set(port, after);
      if (!source) open(after);
      port.postMessage({ type: 'state', state });
      // What was broadcast after the position this tab's page shows: given again when the
      // stream and the ring cover it, else the tab is stale.
      if (after < openedAfter || after < dropped) {
        port.postMessage({ type: 'stale' });
      } else {
        for (const m2 of ring) if (m2.id > after) port.postMessage({ type: 'run', data: m2.data });
      }
    } else if (m.data.type === 'bye') {
      ports.delete(port);
    }
  };
  port.start();
};
