// The embedded approval tells the page framing it what happened (docs/web.md, "Embedding an
// approval"), only ever to the origin the embed token names: loaded, decided, error, resize.
(function () {
  "use strict";
  var data = document.body.dataset;
  var parents = JSON.parse(data.parents || "[]");
  if (window.parent === window || parents.length === 0) {
    return;
  }
  function tell(message) {
    message.source = "signoff";
    parents.forEach(function (origin) {
      window.parent.postMessage(message, origin);
    });
  }
  if (data.event === "loaded") {
    tell({ type: "loaded", approval_id: data.approvalId, hash: data.hash });
  } else if (data.event === "decided") {
    tell({
      type: "decided",
      approval_id: data.approvalId,
      decision: data.decision,
      state: data.state,
      hash: data.shown,
    });
  } else if (data.event === "error") {
    tell({ type: "error", code: data.code, approval_id: data.approvalId || null });
  }
  var last = 0;
  function resize() {
    // The body's own height: the document's would never be less than the frame's.
    var height = Math.ceil(document.body.getBoundingClientRect().height);
    if (height !== last) {
      last = height;
      tell({ type: "resize", height: height });
    }
  }
  resize();
  if (window.ResizeObserver) {
    new ResizeObserver(resize).observe(document.body);
  } else {
    window.addEventListener("resize", resize);
  }
})();
