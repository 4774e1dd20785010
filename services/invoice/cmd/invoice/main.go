// Command invoice is the invoice service of the usage-billing system. Its behaviour
// arrives with the services issue; for now it only builds.
package main

func main() {}
