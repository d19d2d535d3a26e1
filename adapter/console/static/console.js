// rmq-kafka console: refresh the groups table, and the redrive form. No library.
"use strict";
(function () {
  function csrf() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }
  var REFRESH_MS = 10000;
  function refreshGroups() {
    var table = document.getElementById("groups");
    if (!table) return;
    // the next refresh is asked for once this one answered: slow answers never pile up
    var again = function () { setTimeout(refreshGroups, REFRESH_MS); };
    fetch(table.getAttribute("data-refresh"), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) return;
        data.groups.forEach(function (g) {
          var row = table.querySelector('tr[data-group="' + CSS.escape(g.group) + '"]');
          if (!row) return;
          var values = { lag: g.lag, retry_lag: g.retry_lag,
                         dlq_size: g.dlq ? g.dlq.size : null, dlq_growth_1h: g.dlq_growth_1h };
          Object.keys(values).forEach(function (k) {
            var cell = row.querySelector('[data-field="' + k + '"]');
            if (cell) cell.textContent = values[k] === null ? "-" : String(values[k]);
          });
        });
        var late = document.querySelector('[data-field="lateness_ms"]');
        if (late && data.schedule) late.textContent = String(data.schedule.lateness_ms);
      })
      .catch(function () {})
      .then(again);
  }
  function selectionText(sel) {
    if (sel.ids) return sel.ids.length + " id(s)";
    if (sel.filter) {
      return "filter " + Object.keys(sel.filter).map(function (k) {
        return k + "=" + sel.filter[k];
      }).join(", ");
    }
    return "all";
  }
  function filterOf() {
    var out = {};
    document.querySelectorAll("form.filters input").forEach(function (i) {
      if (i.value) out[i.name] = i.value;
    });
    return out;
  }
  function redrive(dryRun) {
    var form = document.getElementById("redrive");
    var out = document.getElementById("redrive-result");
    var what = form.querySelector('input[name="what"]:checked').value;
    var body = { dry_run: dryRun, force: document.getElementById("force").checked };
    var rate = document.getElementById("rate").value;
    if (rate) body.rate = Number(rate);
    var guard = document.getElementById("max_redrives").value;
    if (guard) body.max_redrives = Number(guard);
    if (what === "selected") {
      var picked = document.querySelectorAll("input.pick:checked");
      body.ids = Array.prototype.map.call(picked, function (c) { return c.value; });
      // where they are: only those records are read (a hint; the ids decide)
      body.positions = Array.prototype.map.call(picked, function (c) {
        return c.getAttribute("data-at");
      });
    } else if (what === "filter") {
      body.filter = filterOf();
    } else {
      body.all = true;
    }
    out.textContent = dryRun ? "dry run..." : "redriving...";
    fetch("/api/groups/" + encodeURIComponent(form.getAttribute("data-group")) + "/dlq/redrive", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
      body: JSON.stringify(body),
    })
      .then(function (r) { return r.json().then(function (j) { return [r.status, j]; }); })
      .then(function (res) {
        var j = res[1];
        if (res[0] !== 200) { out.textContent = "refused (" + res[0] + "): " + j.error; return; }
        var lines = [];
        if (j.dry_run) {
          lines.push("dry run: would send " + j.would_send + " of " + j.selected + " selected");
          j.plan.forEach(function (p) { lines.push("  " + p.msg_id + " -> " + p.to); });
        } else {
          lines.push("sent " + j.sent + " of " + j.selected + " selected");
        }
        lines.push(j.already_redriven + " already redriven, " + j.refused_by_loop_guard +
                   " refused by the loop guard");
        if (j.missing_ids.length) lines.push("not in the DLQ: " + j.missing_ids.join(", "));
        out.textContent = lines.join("\n");
        var audit = document.getElementById("audit");
        if (audit && j.audit) {
          var li = document.createElement("li");
          li.className = "audit-line";
          li.textContent = j.audit.at + " " + j.audit.who + " via " + j.audit.source + ": " +
            (j.dry_run ? "dry run" : "redrive") + " " + selectionText(j.audit.selection) + ": " +
            j.audit.selected + " selected, " +
            j.audit.sent + " sent, " + j.audit.already_redriven + " already, " +
            j.audit.refused_by_loop_guard + " refused by the loop guard";
          audit.insertBefore(li, audit.firstChild);
        }
      })
      .catch(function (e) { out.textContent = "failed: " + e; });
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (document.getElementById("groups")) setTimeout(refreshGroups, REFRESH_MS);
    var dry = document.getElementById("dry-run");
    if (dry) dry.addEventListener("click", function () { redrive(true); });
    var run = document.getElementById("run-redrive");
    if (run) run.addEventListener("click", function () { redrive(false); });
  });
})();
