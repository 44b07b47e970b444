from tpulab.cli.main import main

raise SystemExit(main())
