// Capstan console: tell the reader whether a live view is connected. The
// htmx SSE extension fires htmx:sseOpen and htmx:sseError on the element
// with sse-connect; its data-sse attribute and the text of its
// [data-live-status] element follow.
(function () {
  function mark(evt, state, text) {
    var elt = evt.target;
    if (!elt || !elt.setAttribute) { return; }
    elt.setAttribute("data-sse", state);
    var status = document.querySelector("[data-live-status]");
    if (status) { status.textContent = text; }
  }
  document.addEventListener("htmx:sseOpen", function (evt) { mark(evt, "open", "Live: connected."); });
  document.addEventListener("htmx:sseError", function (evt) { mark(evt, "error", "Live updates interrupted: reconnecting…"); });
})();
