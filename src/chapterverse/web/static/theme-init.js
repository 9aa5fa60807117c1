// Applies the saved light/dark choice before first paint (a classic script: no flash of the other theme).
try {
  const saved = localStorage.getItem("chapterverse.theme");
  if (saved === "light" || saved === "dark") document.documentElement.dataset.theme = saved;
} catch (_) {
  /* storage may be disabled: fall back to prefers-color-scheme */
}
