// Starts the dashboard: loads its modules (`app.js` and what it imports), and loads the page
// again when they could not be fetched. A module that fails to load leaves only the header, and
// a browser never fetches it again by itself; that happens when a request is cut off, e.g. by a
// network change (Chromium aborts every request in flight when an interface or address comes or
// goes, as on a node whose jobs get network namespaces) or by a server restarting; a load still
// pending after 20 s counts as failed too. Three reloads at most, a second apart, counted per
// tab; then the page says what failed.
// A classic deferred script, so the modules run once the document is parsed, as a
// `<script type="module">` in the page would.
(function boot() {
  const KEY = 'gantry.boot-reloads';
  const MAX_RELOADS = 3;
  const reloads = Number(sessionStorage.getItem(KEY) || '0');
  const script = document.createElement('script');
  script.type = 'module';
  script.src = '/dashboard/app.js';
  let settled = false;
  // A module load that neither finishes nor fails (a connection a network change left hanging)
  // counts as failed after this long.
  const watchdog = setTimeout(failed, 20000);
  script.addEventListener('load', () => {
    settled = true;
    clearTimeout(watchdog);
    sessionStorage.removeItem(KEY);
  });
  script.addEventListener('error', failed);
  function failed() {
    if (settled) return;
    settled = true;
    clearTimeout(watchdog);
    if (reloads < MAX_RELOADS) {
      sessionStorage.setItem(KEY, String(reloads + 1));
      setTimeout(() => location.reload(), 1000);
      return;
    }
    sessionStorage.removeItem(KEY);
    const main = document.getElementById('main');
    const p = document.createElement('p');
    p.className = 'error';
    p.textContent = 'The dashboard could not load its scripts from the server; reload the page to try again.';
    main.replaceChildren(p);
  }
  document.head.appendChild(script);
})();
