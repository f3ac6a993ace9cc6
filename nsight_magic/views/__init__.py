"""What the user sees: altair chart builders (``charts``), static HTML (``tables``), PNG/SVG
rendering (``static``), and the ipywidgets views of nsys/ncu runs, the kernel picker and
``compare``. No profiling logic lives here: views read frames from the report objects."""
