// A one-tap link's confirmation page: confirming posts the answer as JSON to the same address
// (the daemon takes no other body), then says what was done.
(() => {
  'use strict';
  const form = document.getElementById('link-form');
  if (!form) return;
  const result = document.getElementById('link-result');
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const data = new FormData(form);
    const body = {};
    if (data.has('comment')) body.comment = String(data.get('comment') || '');
    if (data.has('text')) body.text = String(data.get('text') || '');
    const button = document.getElementById('confirm-button');
    button.disabled = true;
    let r;
    try {
      r = await fetch(location.pathname, { method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    } catch (_) {
      result.textContent = 'The daemon could not be reached: try again.';
      button.disabled = false;
      return;
    }
    let answer = null;
    try { answer = await r.json(); } catch (_) { /* no body */ }
    if (r.ok) {
      result.textContent = `Done: ${answer.done}.`;
      form.remove();
    } else {
      result.textContent = (answer && answer.error && answer.error.message) || `HTTP ${r.status}`;
      result.classList.add('error');
      if (r.status !== 422) form.remove(); else button.disabled = false;
    }
  });
})();
