"""What the user sees, laid out from frames that results hand over (``protocols``): altair chart
builders (``charts``, ``timeline_chart``, ``roofline_chart``), charts as live widgets linked to the
picker (``live``), static HTML and formatters (``html``), PNG rendering (``static``), and the
ipywidgets views of nsys/ncu runs, the kernel picker, "profile this range" and ``compare``.
Views import nothing from analysis, reports, results or session."""
