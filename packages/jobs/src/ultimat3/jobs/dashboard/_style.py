"""The dashboard's one stylesheet, served at ``static/dashboard.css`` (no CDN, no build)."""

CSS = """
:root { --fg:#1d232a; --muted:#5b6670; --line:#d9dee3; --bg:#f6f7f9; --accent:#2457a6;
  --bad:#a61b1b; --ok:#1b7a3a; --warn:#8a5a00; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, sans-serif; color:var(--fg); background:var(--bg); }
header { background:#fff; border-bottom:1px solid var(--line); padding:.6rem 1.2rem;
  display:flex; gap:1.4rem; align-items:baseline; flex-wrap:wrap; }
header h1 { font-size:1.1rem; margin:0; }
nav a { margin-right:1rem; color:var(--accent); text-decoration:none; }
nav a[aria-current] { font-weight:600; text-decoration:underline; }
main { padding:1rem 1.2rem; }
h2 { font-size:1.05rem; margin:1.4rem 0 .5rem; }
table { border-collapse:collapse; background:#fff; border:1px solid var(--line);
  margin-bottom:.8rem; }
th, td { padding:.3rem .6rem; border-bottom:1px solid var(--line); text-align:left;
  vertical-align:top; }
th { background:#eef1f4; font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
pre { background:#fff; border:1px solid var(--line); padding:.5rem; overflow:auto;
  max-height:24rem; white-space:pre-wrap; word-break:break-word; }
code { font-size:.92em; }
.state { padding:0 .35rem; border-radius:3px; background:#e6e9ed; }
.state-dead, .state-failed, .state-step-failed { background:#f7d9d9; color:var(--bad); }
.state-done, .state-step-completed { background:#d8efdf; color:var(--ok); }
.state-running, .state-step-started { background:#dde8f8; color:var(--accent); }
.state-suspended, .state-delayed { background:#f6ead2; color:var(--warn); }
.banner { padding:.5rem .8rem; border:1px solid var(--line); background:#fff;
  margin-bottom:1rem; }
.banner.bad { border-color:var(--bad); color:var(--bad); }
.banner.ok { border-color:var(--ok); color:var(--ok); }
.muted { color:var(--muted); }
form.inline { display:inline; margin:0 .3rem 0 0; }
form.filters { background:#fff; border:1px solid var(--line); padding:.6rem;
  margin-bottom:.8rem; display:flex; gap:.6rem; flex-wrap:wrap; align-items:end; }
form.filters label { display:flex; flex-direction:column; font-size:.85rem; color:var(--muted); }
button { font:inherit; padding:.15rem .6rem; cursor:pointer; }
dl.fields { display:grid; grid-template-columns:max-content 1fr; gap:.2rem 1rem;
  background:#fff; border:1px solid var(--line); padding:.6rem; }
dl.fields dt { color:var(--muted); }
dl.fields dd { margin:0; }
.pager a { margin-right:1rem; }
"""
