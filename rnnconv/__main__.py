from rnnconv.cli import main

main()
