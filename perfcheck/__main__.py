from perfcheck.cli import main

raise SystemExit(main())
