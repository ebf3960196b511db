"""Reports from stored results: the HTML page, PNG charts and Markdown summary (render), run-to-run comparison
(compare), the per-shape recommendation (recommend, dispatch_table). Import the module you need."""
