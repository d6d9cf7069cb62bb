// One /api/events stream shared by every tab of the dashboard: a browser opens at most six
// connections to a host over HTTP/1.1, and each tab holding its own stream would use them up.
const ports = new Set();
let source = null;
let state = 'offline';
// The feed position of the newest event broadcast.
let last = 0;

function broadcast(message) {
  for (const port of ports) port.postMessage(message);
}

function open(after, kinds) {
  source = new EventSource(`/api/events?after=${encodeURIComponent(after)}`);
  source.onopen = () => { state = 'live'; broadcast({ type: 'state', state }); };
  source.onerror = () => { state = 'offline'; broadcast({ type: 'state', state }); };
  for (const kind of kinds) {
    source.addEventListener(kind, (e) => {
      last = Math.max(last, Number(e.lastEventId) || 0);
      broadcast({ type: 'event', kind, data: e.data });
    });
  }
}

onconnect = (e) => {
  const port = e.ports[0];
  ports.add(port);
  port.onmessage = (m) => {
    if (m.data.type === 'hello') {
      if (!source) open(m.data.after, m.data.kinds);
      port.postMessage({ type: 'state', state });
      // Events broadcast before this tab joined, after the position its page shows: it is stale.
      if (last > Number(m.data.after)) port.postMessage({ type: 'stale' });
    } else if (m.data.type === 'bye') {
      ports.delete(port);
    }
  };
  port.start();
};
