package worker

import "fmt"

// MaxPixels bounds the images a worker decodes (500 megapixels, a
// 25,000 by 20,000 scan): a small file can declare an image far larger,
// whose decoding would take minutes of CPU and more memory than the
// machine has. Such an image fails its task with CheckPixels' message.
const MaxPixels = 500_000_000

// CheckPixels refuses an image of width by height pixels over MaxPixels.
func CheckPixels(width, height int) error {
	if int64(width)*int64(height) > MaxPixels {
		return fmt.Errorf("the image is %dx%d pixels, more than the %d megapixels a worker decodes",
			width, height, MaxPixels/1_000_000)
	}
	return nil
}
