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

// A refused action is shown, not swallowed: htmx swaps no 4xx or 5xx answer
// by default, so for a target marked data-show-errors the answer is swapped
// in (a plain-text answer as an alert, its text escaped).
(function () {
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var d = evt.detail;
    if (!d.xhr || d.xhr.status < 400 || !d.target || !d.target.hasAttribute("data-show-errors")) { return; }
    d.shouldSwap = true;
    d.isError = false;
    var type = d.xhr.getResponseHeader("Content-Type") || "";
    if (type.indexOf("text/html") !== 0) {
      var p = document.createElement("p");
      p.className = "error";
      p.setAttribute("role", "alert");
      p.textContent = d.serverResponse;
      d.serverResponse = p.outerHTML;
    }
  });
})();
