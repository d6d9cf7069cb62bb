// One /live stream shared by every tab of the dashboard: a browser opens at most six
// connections to a host over HTTP/1.1, and each tab holding its own stream would use them up.
// The stream says which runs changed status (`run` messages); each tab decides what that
// changes on its page.
const ports = new Set();
let source = null;
let state = 'offline';
// The feed position of the newest message broadcast.
let last = 0;

function broadcast(message) {
  for (const port of ports) port.postMessage(message);
}

function open(after) {
  source = new EventSource(`/live?after=${encodeURIComponent(after)}`);
  source.onopen = () => { state = 'live'; broadcast({ type: 'state', state }); };
  source.onerror = () => { state = 'offline'; broadcast({ type: 'state', state }); };
  source.addEventListener('run', (e) => {
    last = Math.max(last, Number(e.lastEventId) || 0);
    broadcast({ type: 'run', data: e.data });
  });
}

onconnect = (e) => {
  const port = e.ports[0];
  ports.add(port);
  port.onmessage = (m) => {
    if (m.data.type === 'hello') {
      if (!source) open(m.data.after);
      port.postMessage({ type: 'state', state });
      // Messages broadcast before this tab joined, after the position its page shows: it is stale.
      if (last > Number(m.data.after)) port.postMessage({ type: 'stale' });
    } else if (m.data.type === 'bye') {
      ports.delete(port);
    }
  };
  port.start();
};
