"use strict";
// Refreshes the status page in place, sending the bearer token kept in this tab (if any).
(() => {
  const TOKEN = "statestore-token";
  const body = () => document.body;

  function headers() {
    const token = sessionStorage.getItem(TOKEN);
    return token ? { Accept: "text/html", Authorization: "Bearer " + token } : { Accept: "text/html" };
  }

  async function refresh() {
    try {
      const answer = await fetch(location.pathname + location.search, { headers: headers(), cache: "no-store" });
      if (!(answer.headers.get("content-type") || "").startsWith("text/html")) throw new Error(answer.status);
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      document.title = page.title;
      body().replaceWith(page.body);
    } catch (error) {
      body().classList.add("unreachable");
      const note = document.getElementById("refreshed");
      if (note) note.textContent = "not refreshed: the service did not answer";
    }
  }

  function schedule() {
    const seconds = Number(body().dataset.refresh || "0");
    if (seconds > 0) {
      setTimeout(async () => {
        if (body().dataset.auth !== "needed") await refresh();
        schedule();
      }, seconds * 1000);
    }
  }

  document.addEventListener("submit", (event) => {
    if (event.target.id !== "token-form") return;
    event.preventDefault();
    sessionStorage.setItem(TOKEN, event.target.elements.token.value.trim());
    refresh();
  });
  document.addEventListener("click", (event) => {
    if (event.target.id !== "forget-token") return;
    sessionStorage.removeItem(TOKEN);
    refresh();
  });

  function start() {
    // A token given earlier in this tab: a reload arrives without it, so ask again with it.
    if (body().dataset.auth === "needed" && sessionStorage.getItem(TOKEN)) refresh();
    schedule();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
