// kstatus reads Kubernetes objects as JSON, one per line on stdin, and prints for each the status
// that sigs.k8s.io/cli-utils' kstatus computes (as Flux and kpt do), as one JSON line.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var object map[string]interface{}
		if err := utiljson.Unmarshal(in.Bytes(), &object); err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: not a JSON object: %v\n", err)
			os.Exit(2)
		}
		result, err := status.Compute(&unstructured.Unstructured{Object: object})
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
			os.Exit(1)
		}
		if err := out.Encode(map[string]string{"status": string(result.Status), "message": result.Message}); err != nil {
			os.Exit(1)
		}
	}
}
