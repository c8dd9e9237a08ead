from llada_lsp.cli import main

raise SystemExit(main())
