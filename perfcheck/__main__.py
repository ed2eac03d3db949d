from perfcheck.cli.main import main

raise SystemExit(main())
